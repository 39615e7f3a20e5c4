// The queue lane's model: chat deployments on the Azure OpenAI account (created by
// modules/openai-account.bicep, shared with the Global Batch lane), one per model alias the
// app serves. The app's one-provider shorthand (AllowedModels + ModelProvider=azure_openai)
// calls each alias through the deployment of the same name, so each deployment is named
// after its alias. The app identity gets Cognitive Services OpenAI User on this account only;
// the account accepts no keys (disableLocalAuth), so that role is the only way in.
// https://learn.microsoft.com/azure/ai-foundry/openai/how-to/create-resource

// Shared constants, fixed at compile time (role-definitions.json).
var roleDefinitionIds = loadJsonContent('role-definitions.json', '$.roleDefinitionIds')

@description('Name of the existing Azure OpenAI account of this resource group the deployments belong to.')
@minLength(2)
@maxLength(64)
param accountName string

@description('Deployment names: the model aliases the app serves (AllowedModels), one deployment each.')
@minLength(1)
param deploymentNames array

@description('Model every deployment serves, e.g. gpt-5.1 (it must offer the SKU in the account\'s region).')
param modelName string = 'gpt-5.1'

@description('Model version, e.g. 2025-11-13 for gpt-5.1.')
param modelVersion string = '2025-11-13'

@description('Deployment type: GlobalStandard (the global pool, the widest model and region choice), DataZoneStandard (processing stays in the data zone) or Standard (in the account\'s region).')
@allowed([
  'GlobalStandard'
  'DataZoneStandard'
  'Standard'
])
param skuName string = 'GlobalStandard'

@description('Capacity of each deployment in thousands of tokens per minute, within the subscription\'s quota for the model and SKU (every deployment takes this much of it).')
@minValue(1)
param capacity int = 30

@description('Principal id of the Function App identity, the only caller.')
param appPrincipalId string

resource account 'Microsoft.CognitiveServices/accounts@2026-07-01' existing = {
  name: accountName
}

// An account takes one deployment operation at a time: the deployments go one by one.
@batchSize(1)
resource chatDeployments 'Microsoft.CognitiveServices/accounts/deployments@2026-07-01' = [
  for name in deploymentNames: {
    parent: account
    name: name
    sku: {
      name: skuName
      capacity: capacity
    }
    properties: {
      model: {
        format: 'OpenAI'
        name: modelName
        version: modelVersion
      }
      // The version asked for stays until Azure retires it, then the deployment moves on
      // to the default version instead of stopping.
      versionUpgradeOption: 'OnceCurrentVersionExpired'
    }
  }
]

// Least privilege: inference on this account only (no management, no keys).
resource modelCaller 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
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
output deploymentNames array = deploymentNames
