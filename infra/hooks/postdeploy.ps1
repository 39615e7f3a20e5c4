# azd postdeploy hook (azure.yaml) for Windows: the same steps as postdeploy.sh.
# Stage 2, the Event Grid subscriptions (infra/eventgrid-subscriptions.bicep), runs once
# `azd deploy` has published the code: it reads the blobs extension system key and the
# default function key, which the Functions host creates when it starts with the code.
# Uses the Azure CLI (`az login`, or `azd config set auth.useAzCliAuth true`).
# Re-run alone: `azd hooks run postdeploy`.
$ErrorActionPreference = 'Stop'

function Require([string] $name, [string] $hint) {
    $value = [Environment]::GetEnvironmentVariable($name)
    if ([string]::IsNullOrEmpty($value)) { throw "postdeploy: $name is not set: $hint" }
    return $value
}

# Stage 2 is an az deployment: without az, or signed out, stop now with the cause (the key
# loop below would otherwise wait five minutes on an error it hides).
if (-not (Get-Command az -ErrorAction SilentlyContinue)) {
    throw 'postdeploy: stage 2 (the Event Grid subscriptions) needs the Azure CLI (az), which is not on PATH: install it (https://aka.ms/installazurecli), run az login, then run: azd hooks run postdeploy'
}
az account show --output none 2>$null
if ($LASTEXITCODE -ne 0) {
    throw 'postdeploy: the Azure CLI is not signed in: run az login (in the tenant azd deploys to), then run: azd hooks run postdeploy'
}

$infraDir = Split-Path -Parent $PSScriptRoot
$subscription = Require 'AZURE_SUBSCRIPTION_ID' 'run this through azd (azd up, azd deploy, azd hooks run postdeploy)'
$resourceGroup = Require 'AZURE_RESOURCE_GROUP' 'set it in the azd environment'
$environmentName = Require 'environmentName' 'main.bicep output missing: run azd provision first'
$app = Require 'functionAppName' 'main.bicep output missing: run azd provision first'

# The first start after a deploy creates the key; asking for the keys wakes the host.
for ($attempt = 1; ; $attempt++) {
    $key = az functionapp keys list --subscription $subscription --resource-group $resourceGroup `
        --name $app --query 'systemKeys.blobs_extension' --output tsv 2>$null
    if ($LASTEXITCODE -eq 0 -and -not [string]::IsNullOrEmpty($key)) { break }
    if ($attempt -ge 20) {
        throw "postdeploy: $app has no blobs_extension key yet; check that the code deployed and the host starts, then run: azd hooks run postdeploy"
    }
    Write-Host "postdeploy: waiting for the Functions host of $app to create its keys ($attempt/20)"
    Start-Sleep -Seconds 15
}
Remove-Variable key

Write-Host "postdeploy: creating the Event Grid subscriptions (stage 2) in $resourceGroup"
az deployment group create `
    --subscription $subscription `
    --resource-group $resourceGroup `
    --name eventgrid-subscriptions `
    --template-file (Join-Path $infraDir 'eventgrid-subscriptions.bicep') `
    --parameters "environmentName=$environmentName" `
    --parameters "webhookEntraApplicationIdOrUri=$($env:INFERBUS_WEBHOOK_TOKEN_AUDIENCE)" `
    --output none
if ($LASTEXITCODE -ne 0) { throw "postdeploy: the stage 2 deployment failed (exit code $LASTEXITCODE)" }
Write-Host 'postdeploy: Event Grid subscriptions are in place'
