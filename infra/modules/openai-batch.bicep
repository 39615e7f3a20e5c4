// Azure OpenAI Global Batch: the model deployment the app's batch lane submits to.
//
// The app is the only submitter (infra/README.md, Global Batch): it uploads the JSONL input
// files, creates the batches, polls them and records each tenant's usage. Its identity gets
// Cognitive Services OpenAI User on this account (the same assignment as the queue lane's,
// modules/openai-chat.bicep, when both share the account); no other principal gets a data
// role here, and the account accepts no keys (disableLocalAuth), so nothing can submit
// batches past the app's metering.
//
// The account is an existing one of this resource group: the account main.bicep creates
// (modules/openai-account.bicep, shared with the queue lane's model) or one it names.
// A GlobalBatch deployment draws on the subscription's enqueued-token quota for the model,
// separate from the tokens-per-minute quota of Standard deployments.
// https://learn.microsoft.com/azure/ai-foundry/openai/how-to/batch

// Shared constants, fixed at compile time (role-definitions.json).
var roleDefinitionIds = loadJsonContent('role-definitions.json', '$.roleDefinitionIds')

@description('Name of the existing Azure OpenAI account of this resource group the deployment belongs to.')
@minLength(2)
@maxLength(64)
param accountName string

@description('Name of the Global Batch deployment (the model name every line of an input file carries).')
param deploymentName string

@description('Model the deployment serves, e.g. gpt-5.1 (it must offer the GlobalBatch SKU in the account\'s region).')
param modelName string = 'gpt-5.1'

@description('Model version, e.g. 2025-11-13 for gpt-5.1.')
param modelVersion string = '2025-11-13'

@description('Capacity of the deployment: its share of the enqueued-token quota, in thousands of tokens. The app plans files below it (GlobalBatch__enqueuedTokens, capacity x 1000) and fails the requests of a batch still refused for quota when their deadline or GlobalBatch__quotaWaitLimitSeconds comes (batch_quota_exceeded).')
@minValue(1)
param capacity int = 50

@description('Principal id of the Function App identity, the only submitter.')
param appPrincipalId string

// The account the deployment and the role belong to (main.bicep orders this module after
// the account's creation and after the queue lane's deployments: an account takes one
// deployment operation at a time).
resource account 'Microsoft.CognitiveServices/accounts@2026-07-01' existing = {
  name: accountName
}

resource batchDeployment 'Microsoft.CognitiveServices/accounts/deployments@2026-07-01' = {
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
    // As the queue lane's: the version asked for stays until Azure retires it, then the
    // deployment moves on to the default version instead of failing every batch.
    versionUpgradeOption: 'OnceCurrentVersionExpired'
  }
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
}

output accountId string = account.id
output endpoint string = account.properties.endpoint
output deploymentName string = batchDeployment.name
