// Azure OpenAI Global Batch: the model deployment the app's batch lane submits to.
//
// The app is the only submitter (infra/README.md, Global Batch): it uploads the JSONL input
// files, creates the batches, polls them and records each tenant's usage. Its identity gets
// Cognitive Services OpenAI User on this account and nowhere else; no other principal gets a
// data role here, and the account accepts no keys (disableLocalAuth), so nothing can submit
// batches past the app's metering.
//
// The account is created (createAccount, modules/openai-account.bicep) or is an existing
// one of this resource group.
// A GlobalBatch deployment draws on the subscription's enqueued-token quota for the model,
// separate from the tokens-per-minute quota of Standard deployments.
// https://learn.microsoft.com/azure/ai-foundry/openai/how-to/batch

// Shared constants, fixed at compile time (role-definitions.json).
var roleDefinitionIds = loadJsonContent('role-definitions.json', '$.roleDefinitionIds')

@description('Azure region of a created account (Global Batch serves requests from any region of the global pool).')
param location string

@description('Create the Azure OpenAI account (true), or use an existing account of this resource group named accountName (false).')
param createAccount bool = true

@description('Name of the Azure OpenAI account; a created account also takes it as its custom subdomain (<name>.openai.azure.com), which must be globally unique.')
@minLength(2)
@maxLength(64)
param accountName string

@description('Public network access of a created account: Enabled (the Flex Consumption app has no VNet integration; Microsoft Entra ID only) or Disabled (private endpoints, not deployed here).')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

@description('Name of the Global Batch deployment (the model name every line of an input file carries).')
param deploymentName string

@description('Model the deployment serves, e.g. gpt-4o-mini (it must offer the GlobalBatch SKU in the account\'s region).')
param modelName string = 'gpt-4o-mini'

@description('Model version, e.g. 2024-07-18 for gpt-4o-mini.')
param modelVersion string = '2024-07-18'

@description('Capacity of the deployment: its share of the enqueued-token quota, in thousands of tokens. Batches whose tokens would exceed it are refused (the app retries them with backoff).')
@minValue(1)
param capacity int = 50

@description('Principal id of the Function App identity, the only submitter.')
param appPrincipalId string

@description('Tags applied to a created account.')
param tags object = {}

// A created account comes from its own module: checkov reads the properties of an
// unconditional resource only, and the account's (no keys, network access) must be checked.
module newAccount 'openai-account.bicep' = if (createAccount) {
  name: 'openai-account'
  params: {
    location: location
    name: accountName
    publicNetworkAccess: publicNetworkAccess
    tags: tags
  }
}

// The account the deployment and the role belong to: the one created above, or an existing
// one. Everything below waits for the creation when there is one.
resource account 'Microsoft.CognitiveServices/accounts@2024-10-01' existing = {
  name: accountName
}

resource batchDeployment 'Microsoft.CognitiveServices/accounts/deployments@2024-10-01' = {
  parent: account
  name: deploymentName
  sku: {
    name: 'GlobalBatch'
    capacity: capacity
  }
  properties: {
    model: {
      format: 'OpenAI'
      name: modelName
      version: modelVersion
    }
  }
  dependsOn: [
    newAccount
  ]
}

// Least privilege: inference, files and batches on this account only (no management, no keys).
resource batchSubmitter 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(account.id, appPrincipalId, roleDefinitionIds.cognitiveServicesOpenAIUser)
  scope: account
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.cognitiveServicesOpenAIUser)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
  dependsOn: [
    newAccount
  ]
}

output accountId string = account.id
output endpoint string = account.properties.endpoint
output deploymentName string = batchDeployment.name
