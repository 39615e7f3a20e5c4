// Data storage: the application's containers (claim-check inputs, results, jobs,
// idempotency records, ledgers) and the Event Grid dead-letter container.
// The app identity is Storage Blob Data Contributor on each app container, never on the
// account; Event Grid's identity may write only to the dead-letter container.
//
// The blob trigger (connection "Storage", source EventGrid) adds what Microsoft documents for
// an identity-based blob trigger: Storage Blob Data Owner and Storage Queue Data Contributor.
// https://learn.microsoft.com/azure/azure-functions/functions-bindings-storage-blob-trigger#identity-based-connections
// Owner is scoped to the one container the trigger reads (incoming); the queue role is on
// this account, where the blobs extension creates its poison queue (webjobs-blobtrigger-poison)
// on demand. Receipts and the trigger's own work queue live in the host account.

// Shared constants, fixed at compile time (catalog.json, role-definitions.json).
var appContainerNames = loadJsonContent('catalog.json', '$.appContainerNames')
var dataContainers = loadJsonContent('catalog.json', '$.dataContainers')
var roleDefinitionIds = loadJsonContent('role-definitions.json', '$.roleDefinitionIds')

@description('Azure region of the account.')
param location string

@description('Storage account name (3-24 lowercase letters and digits).')
param name string

@description('Storage SKU.')
param skuName string = 'Standard_LRS'

@description('Principal id of the Function App identity.')
param appPrincipalId string

@description('Principal id of the identity Event Grid uses to write dead-lettered events.')
param eventGridPrincipalId string

@description('Days an uploaded blob stays in the incoming container.')
@minValue(1)
param incomingRetentionDays int = 7

@description('Days a claim-check input stays in the inputs container.')
@minValue(1)
param inputsRetentionDays int = 30

@description('Days a result stays in the results container.')
@minValue(1)
param resultsRetentionDays int = 90

@description('Days a dead-lettered Event Grid event is kept.')
@minValue(1)
param deadLetterRetentionDays int = 30

@description('Tags applied to every resource.')
param tags object = {}

resource account 'Microsoft.Storage/storageAccounts@2024-01-01' = {
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
    publicNetworkAccess: 'Enabled'
    networkAcls: {
      bypass: 'AzureServices'
      defaultAction: 'Allow'
    }
  }
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2024-01-01' = {
  parent: account
  name: 'default'
}

resource appContainers 'Microsoft.Storage/storageAccounts/blobServices/containers@2024-01-01' = [
  for containerName in appContainerNames: {
    parent: blobService
    name: containerName
    properties: {
      publicAccess: 'None'
    }
  }
]

// The container the blob trigger watches, created by appContainers above.
resource incomingContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2024-01-01' existing = {
  parent: blobService
  name: dataContainers.incoming
}

resource deadLetterContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2024-01-01' = {
  parent: blobService
  name: dataContainers.eventGridDeadLetters
  properties: {
    publicAccess: 'None'
  }
}

// Retention: claim-check inputs and results are kept for a bounded time; job and
// idempotency records are small and kept until a later policy says otherwise.
resource lifecycle 'Microsoft.Storage/storageAccounts/managementPolicies@2024-01-01' = {
  parent: account
  name: 'default'
  properties: {
    policy: {
      rules: [
        {
          name: 'expire-incoming'
          enabled: true
          type: 'Lifecycle'
          definition: {
            filters: {
              blobTypes: [
                'blockBlob'
              ]
              prefixMatch: [
                '${dataContainers.incoming}/'
              ]
            }
            actions: {
              baseBlob: {
                delete: {
                  daysAfterModificationGreaterThan: incomingRetentionDays
                }
              }
            }
          }
        }
        {
          name: 'expire-inputs'
          enabled: true
          type: 'Lifecycle'
          definition: {
            filters: {
              blobTypes: [
                'blockBlob'
              ]
              prefixMatch: [
                '${dataContainers.inputs}/'
              ]
            }
            actions: {
              baseBlob: {
                delete: {
                  daysAfterModificationGreaterThan: inputsRetentionDays
                }
              }
            }
          }
        }
        {
          name: 'expire-results'
          enabled: true
          type: 'Lifecycle'
          definition: {
            filters: {
              blobTypes: [
                'blockBlob'
              ]
              prefixMatch: [
                '${dataContainers.results}/'
              ]
            }
            actions: {
              baseBlob: {
                delete: {
                  daysAfterModificationGreaterThan: resultsRetentionDays
                }
              }
            }
          }
        }
        {
          name: 'expire-eventgrid-deadletters'
          enabled: true
          type: 'Lifecycle'
          definition: {
            filters: {
              blobTypes: [
                'blockBlob'
              ]
              prefixMatch: [
                '${dataContainers.eventGridDeadLetters}/'
              ]
            }
            actions: {
              baseBlob: {
                delete: {
                  daysAfterModificationGreaterThan: deadLetterRetentionDays
                }
              }
            }
          }
        }
      ]
    }
  }
}

resource appContainerContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (containerName, i) in appContainerNames: {
    name: guid(appContainers[i].id, appPrincipalId, roleDefinitionIds.storageBlobDataContributor)
    scope: appContainers[i]
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.storageBlobDataContributor)
      principalId: appPrincipalId
      principalType: 'ServicePrincipal'
    }
  }
]

// Blob trigger on "incoming" (identity-based connection): the documented trigger role, on
// that container alone.
resource blobTriggerOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(incomingContainer.id, appPrincipalId, roleDefinitionIds.storageBlobDataOwner)
  scope: incomingContainer
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.storageBlobDataOwner)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
  dependsOn: [
    appContainers
  ]
}

// Blob trigger poison queue (Storage__queueServiceUri points at this account). The account
// holds no other queue.
resource blobTriggerQueueContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(account.id, appPrincipalId, roleDefinitionIds.storageQueueDataContributor)
  scope: account
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.storageQueueDataContributor)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

resource deadLetterWriter 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(deadLetterContainer.id, eventGridPrincipalId, roleDefinitionIds.storageBlobDataContributor)
  scope: deadLetterContainer
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.storageBlobDataContributor)
    principalId: eventGridPrincipalId
    principalType: 'ServicePrincipal'
  }
}

output id string = account.id
output name string = account.name
output blobEndpoint string = account.properties.primaryEndpoints.blob
output queueEndpoint string = account.properties.primaryEndpoints.queue
