#!/bin/sh
# azd postdeploy hook (azure.yaml): stage 2, the Event Grid subscriptions
# (infra/eventgrid-subscriptions.bicep), once `azd deploy` has published the code.
#
# Stage 2 reads the blobs extension system key and the default function key, which the
# Functions host creates when it starts with the code, and Event Grid validates each
# webhook when its subscription is created; hence after the deploy, not in `azd provision`.
#
# azd hands the environment's values to hooks: AZURE_SUBSCRIPTION_ID, AZURE_RESOURCE_GROUP
# and main.bicep's outputs (environmentName, functionAppName). The deployment itself uses
# the Azure CLI, signed in to the same tenant: `az login`, or make azd use the az sign-in
# with `azd config set auth.useAzCliAuth true`. Re-run alone: `azd hooks run postdeploy`.
set -eu

# Stage 2 is an az deployment: without az, or signed out, stop now with the cause (the key
# loop below would otherwise wait five minutes on an error it hides).
if ! command -v az >/dev/null 2>&1; then
  echo "postdeploy: stage 2 (the Event Grid subscriptions) needs the Azure CLI (az), which" \
    "is not on PATH: install it (https://aka.ms/installazurecli), run az login, then run:" \
    "azd hooks run postdeploy" >&2
  exit 1
fi
if ! az account show --output none >/dev/null 2>&1; then
  echo "postdeploy: the Azure CLI is not signed in: run az login (in the tenant azd deploys" \
    "to), then run: azd hooks run postdeploy" >&2
  exit 1
fi

# Parameter expansion, not dirname: the hook needs nothing on PATH but az.
case $0 in */*) hooks_dir=${0%/*} ;; *) hooks_dir=. ;; esac
infra_dir=$(cd "$hooks_dir/.." && pwd)
subscription=${AZURE_SUBSCRIPTION_ID:?run this through azd (azd up, azd deploy, azd hooks run postdeploy)}
resource_group=${AZURE_RESOURCE_GROUP:?AZURE_RESOURCE_GROUP is not set in the azd environment}
environment_name=${environmentName:?main.bicep output environmentName is missing: run azd provision first}
app=${functionAppName:?main.bicep output functionAppName is missing: run azd provision first}

# The first start after a deploy creates the key; asking for the keys wakes the host.
attempt=1
while :; do
  key=$(az functionapp keys list --subscription "$subscription" --resource-group "$resource_group" \
    --name "$app" --query "systemKeys.blobs_extension" --output tsv 2>/dev/null || true)
  if [ -n "$key" ]; then
    break
  fi
  if [ "$attempt" -ge 20 ]; then
    echo "postdeploy: $app has no blobs_extension key yet; check that the code deployed and" \
      "the host starts, then run: azd hooks run postdeploy" >&2
    exit 1
  fi
  echo "postdeploy: waiting for the Functions host of $app to create its keys ($attempt/20)"
  attempt=$((attempt + 1))
  sleep 15
done
unset key

echo "postdeploy: creating the Event Grid subscriptions (stage 2) in $resource_group"
az deployment group create \
  --subscription "$subscription" \
  --resource-group "$resource_group" \
  --name eventgrid-subscriptions \
  --template-file "$infra_dir/eventgrid-subscriptions.bicep" \
  --parameters environmentName="$environment_name" \
  --parameters webhookEntraApplicationIdOrUri="${INFERBUS_WEBHOOK_TOKEN_AUDIENCE:-}" \
  --output none
echo "postdeploy: Event Grid subscriptions are in place"
