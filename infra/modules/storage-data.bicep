// Data storage: the application's containers (claim-check inputs, jobs with their results,
// Idempotency-Key markers, ledgers, the Global Batch lane's batches) and the Event Grid
// dead-letter container.
// The app identity is Storage Blob Data Contributor on each app container, never on the
// account; Event Grid's identity may write only to the dead-letter container.
//
// The blob trigger (connection "Storage", source EventGrid) adds what Microsoft documents for
// an identity-based blob trigger: Storage Blob Data Owner and Storage Queue Data Contributor.
// https://learn.microsoft.com/azure/azure-functions/functions-bindings-storage-blob-trigger#identity-based-connections
// Owner is scoped to the one container the trigger reads (incoming); the queue role is on
// this account, where the blobs extension creates its poison queue (webjobs-blobtrigger-poison)
// on demand. Receipts and the trigger's own work queue live in the host account.
//
// The jobs container is indexed by Blob index tags written with each job (shared/job_index.py):
// writing tags (blobs/tags/write) and finding blobs by them (blobs/filter/action) are data
// actions of Storage Blob Data Owner, not Contributor, so the app is Owner of that container
// alone. https://learn.microsoft.com/azure/storage/blobs/storage-manage-find-blobs
//
// Retention: every container that accumulates has a lifecycle delete rule (below), its days
// a parameter. Rules run about once a day, so a blob goes a day or two after its limit.
// https://learn.microsoft.com/azure/storage/blobs/lifecycle-management-overview

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

// The longest request deadline is MaxDeadlineSeconds (86400 s, function-app.bicep): a
// request's input, its job and its ledger entries must outlive it, hence minValue 2 there.

@description('Days a document dropped in the incoming container is kept; it is the input of the job it starts, so it must outlive the longest request deadline (1 day).')
@minValue(2)
param incomingRetentionDays int = 7

@description('Days a claim-check input stays in the inputs container; it must outlive the longest request deadline (1 day).')
@minValue(2)
param inputsRetentionDays int = 30

@description('Days a job document (status and result) stays in the jobs container after its last update; the app answers 410 Gone for an older request id (JobRetentionDays).')
@minValue(2)
param jobsRetentionDays int = 90

@description('Days an Idempotency-Key marker stays in the idempotency container: a key is remembered at least this long.')
@minValue(1)
param idempotencyRetentionDays int = 1

@description('Days a deferral ledger entry or an Event Grid replay marker stays in the ledgers container; it must outlive the longest request deadline (1 day), and replay markers the dead letters they guard (deadLetterRetentionDays).')
@minValue(2)
param ledgersRetentionDays int = 30

@description('Days a tenant\'s month of usage (tokens and cost per model, lane and day; the budgets\' counter) is kept in the usage container after its last change: a year and a month by default, for yearly chargeback.')
@minValue(62)
param usageRetentionDays int = 400

@description('Days a blob of the batches container (Global Batch lane: pending requests, submissions, the tenant ledger, copies of the service\'s output files) is kept after its last change; the copies are the platform\'s record, so no shorter than the service keeps its own (GlobalBatch__outputExpiryDays, at most 30 days).')
@minValue(30)
param batchRetentionDays int = 90

@description('Days a dead-lettered Event Grid event is kept.')
@minValue(1)
param deadLetterRetentionDays int = 30

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

resource appContainers 'Microsoft.Storage/storageAccounts/blobServices/containers@2026-04-01' = [
  for containerName in appContainerNames: {
    parent: blobService
    name: containerName
    properties: {
      publicAccess: 'None'
    }
  }
]

// The container of job documents and their index tags, created by appContainers above.
resource jobsContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2026-04-01' existing = {
  parent: blobService
  name: dataContainers.jobs
}

// The container the blob trigger watches, created by appContainers above.
resource incomingContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2026-04-01' existing = {
  parent: blobService
  name: dataContainers.incoming
}

resource deadLetterContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2026-04-01' = {
  parent: blobService
  name: dataContainers.eventGridDeadLetters
  properties: {
    publicAccess: 'None'
  }
}

// Retention: one delete rule per container, days after the blob's last modification (a
// job document is rewritten as its request moves on, so its clock starts at its last
// update). Every container the app writes to is listed: nothing accumulates unbounded.
resource lifecycle 'Microsoft.Storage/storageAccounts/managementPolicies@2026-04-01' = {
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
          name: 'expire-jobs'
          enabled: true
          type: 'Lifecycle'
          definition: {
            filters: {
              blobTypes: [
                'blockBlob'
              ]
              prefixMatch: [
                '${dataContainers.jobs}/'
              ]
            }
            actions: {
              baseBlob: {
                delete: {
                  daysAfterModificationGreaterThan: jobsRetentionDays
                }
              }
            }
          }
        }
        {
          name: 'expire-idempotency'
          enabled: true
          type: 'Lifecycle'
          definition: {
            filters: {
              blobTypes: [
                'blockBlob'
              ]
              prefixMatch: [
                '${dataContainers.idempotency}/'
              ]
            }
            actions: {
              baseBlob: {
                delete: {
                  daysAfterModificationGreaterThan: idempotencyRetentionDays
                }
              }
            }
          }
        }
        {
          name: 'expire-ledgers'
          enabled: true
          type: 'Lifecycle'
          definition: {
            filters: {
              blobTypes: [
                'blockBlob'
              ]
              prefixMatch: [
                '${dataContainers.ledgers}/'
              ]
            }
            actions: {
              baseBlob: {
                delete: {
                  daysAfterModificationGreaterThan: ledgersRetentionDays
                }
              }
            }
          }
        }
        {
          name: 'expire-usage'
          enabled: true
          type: 'Lifecycle'
          definition: {
            filters: {
              blobTypes: [
                'blockBlob'
              ]
              prefixMatch: [
                '${dataContainers.usage}/'
              ]
            }
            actions: {
              baseBlob: {
                delete: {
                  daysAfterModificationGreaterThan: usageRetentionDays
                }
              }
            }
          }
        }
        {
          name: 'expire-batches'
          enabled: true
          type: 'Lifecycle'
          definition: {
            filters: {
              blobTypes: [
                'blockBlob'
              ]
              prefixMatch: [
                '${dataContainers.batches}/'
              ]
            }
            actions: {
              baseBlob: {
                delete: {
                  daysAfterModificationGreaterThan: batchRetentionDays
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

// The job index (blob index tags on the jobs container): set with every job write, queried by
// the watchdog and the usage report instead of listing every retained job.
resource jobIndexOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(jobsContainer.id, appPrincipalId, roleDefinitionIds.storageBlobDataOwner)
  scope: jobsContainer
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
