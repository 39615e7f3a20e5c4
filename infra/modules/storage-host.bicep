// Host storage: AzureWebJobsStorage of the Functions runtime and the Flex Consumption
// deployment container. Nothing of the application's data lives here, so the app identity
// can be Storage Blob Data Owner on this account without reaching application data.

// Shared constants, fixed at compile time (catalog.json, role-definitions.json).
var deploymentContainerName = loadJsonContent('catalog.json', '$.deploymentContainerName')
var roleDefinitionIds = loadJsonContent('role-definitions.json', '$.roleDefinitionIds')

@description('Azure region of the account.')
param location string

@description('Storage account name (3-24 lowercase letters and digits).')
param name string

@description('Storage SKU.')
param skuName string = 'Standard_LRS'

@description('Principal id of the Function App identity.')
param appPrincipalId string

@description('Public network access: Enabled (the default) or Disabled (main.bicep\'s privateNetworking: reached through its private endpoints only).')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

@description('Tags applied to every resource.')
param tags object = {}

resource account 'Microsoft.Storage/storageAccounts@2026-04-01' = {
  name: name
  location: location
  tags: tags
  kind: 'StorageV2'
  sku: {
    name: skuName
  }
  properties: {
    accessTier: 'Hot'
    allowBlobPublicAccess: false
    allowSharedKeyAccess: false
    defaultToOAuthAuthentication: true
    minimumTlsVersion: 'TLS1_2'
    supportsHttpsTrafficOnly: true
    publicNetworkAccess: publicNetworkAccess
    networkAcls: {
      bypass: 'AzureServices'
      defaultAction: (publicNetworkAccess == 'Disabled') ? 'Deny' : 'Allow'
    }
  }
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2026-04-01' = {
  parent: account
  name: 'default'
}

resource deploymentContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2026-04-01' = {
  parent: blobService
  name: deploymentContainerName
  properties: {
    publicAccess: 'None'
  }
}

// The Functions host keeps keys, leases and blob-trigger receipts in blobs, and blob-trigger
// bookkeeping (poison messages) in queues of AzureWebJobsStorage.
resource hostBlobOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(account.id, appPrincipalId, roleDefinitionIds.storageBlobDataOwner)
  scope: account
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.storageBlobDataOwner)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource hostQueueContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(account.id, appPrincipalId, roleDefinitionIds.storageQueueDataContributor)
  scope: account
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.storageQueueDataContributor)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

output id string = account.id
output name string = account.name
output blobEndpoint string = account.properties.primaryEndpoints.blob
output deploymentContainerUrl string = '${account.properties.primaryEndpoints.blob}${deploymentContainerName}'
