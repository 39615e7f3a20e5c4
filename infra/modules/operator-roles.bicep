// Data roles of an operator (a user, a group or a service principal): exactly what the
// operators' commands need in Azure (python -m shared.ops, docs/operations.md, "Roles for
// operators"), each on the container or the entity it acts on, never on the storage account
// or the namespace. main.bicep deploys this module only when operatorPrincipalId is set (azd
// passes the signed-in principal, AZURE_PRINCIPAL_ID).
//
//   sb-deadletters list|show|purge   Receiver on each request queue and results subscription
//                                    (peek, receive and complete their dead-letter sub-queues)
//   sb-deadletters replay            Sender on each request queue and on the results topic;
//                                    the job it reopens (jobs) and its markers (ledgers)
//   deadletters list|replay          Contributor on eventgrid-deadletters (read; delete by
//                                    hand); the replay is intake's work: a BlobCreated
//                                    document read in incoming, claim checks in inputs,
//                                    Idempotency-Key markers in idempotency, the job in jobs,
//                                    the send to the request queue, and its markers in ledgers
//   usage                            Reader on usage: the ledger's month documents, listed
//                                    and read
//   usage --from-jobs, jobs reindex  Owner on jobs: the job index's tags are found
//                                    (blobs/filter/action) and written (blobs/tags/write) by
//                                    Owner's data actions only, as for the app
//
// Not granted: Azure Service Bus Data Owner (Manage). Intake reads a queue's depth for
// backpressure and, unable to, stays open (shared/intake/backpressure.py), so a replay works
// without it. Nothing of the batches container or of the host account is used.

// Shared constants, fixed at compile time (catalog.json, role-definitions.json).
var dataContainers = loadJsonContent('catalog.json', '$.dataContainers')
var serviceBusQueues = loadJsonContent('catalog.json', '$.serviceBusQueues')
var resultsTopicName = loadJsonContent('catalog.json', '$.resultsTopicName')
var resultsSubscriptions = loadJsonContent('catalog.json', '$.resultsTopic.subscriptions')
var roleDefinitionIds = loadJsonContent('role-definitions.json', '$.roleDefinitionIds')

@description('Object id of the operator: a user, a group (every member may run the commands) or a service principal.')
param principalId string

@description('Type of principalId, as Microsoft Entra ID knows it.')
@allowed([
  'User'
  'Group'
  'ServicePrincipal'
])
param principalType string = 'User'

@description('Name of the data storage account (modules/storage-data.bicep).')
param dataStorageAccountName string

@description('Name of the Service Bus namespace (modules/servicebus.bicep).')
param serviceBusNamespaceName string

// --- data storage: the containers the commands read and write -------------------------------

resource account 'Microsoft.Storage/storageAccounts@2026-04-01' existing = {
  name: dataStorageAccountName
}

resource blobService 'Microsoft.Storage/storageAccounts/blobServices@2026-04-01' existing = {
  parent: account
  name: 'default'
}

resource jobsContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2026-04-01' existing = {
  parent: blobService
  name: dataContainers.jobs
}

resource inputsContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2026-04-01' existing = {
  parent: blobService
  name: dataContainers.inputs
}

resource idempotencyContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2026-04-01' existing = {
  parent: blobService
  name: dataContainers.idempotency
}

resource ledgersContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2026-04-01' existing = {
  parent: blobService
  name: dataContainers.ledgers
}

resource usageContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2026-04-01' existing = {
  parent: blobService
  name: dataContainers.usage
}

resource incomingContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2026-04-01' existing = {
  parent: blobService
  name: dataContainers.incoming
}

resource deadLetterContainer 'Microsoft.Storage/storageAccounts/blobServices/containers@2026-04-01' existing = {
  parent: blobService
  name: dataContainers.eventGridDeadLetters
}

// usage --from-jobs (Find Blobs by Tags, then each job), jobs reindex (tags written with each job), and
// every job a replay writes (a reopened job, a replayed event's new job): a job write carries
// its index tags, which Contributor may not write.
resource jobsOwner 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(jobsContainer.id, principalId, roleDefinitionIds.storageBlobDataOwner)
  scope: jobsContainer
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.storageBlobDataOwner)
    principalId: principalId
    principalType: principalType
  }
}

// Event Grid replay, through intake: an event's inline text is stored as a claim check here,
// and a blob reference into this container is read.
resource inputsContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(inputsContainer.id, principalId, roleDefinitionIds.storageBlobDataContributor)
  scope: inputsContainer
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.storageBlobDataContributor)
    principalId: principalId
    principalType: principalType
  }
}

// Event Grid replay, through intake: each event's dedupe key is an Idempotency-Key marker,
// created before the send and deleted when the send fails.
resource idempotencyContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(idempotencyContainer.id, principalId, roleDefinitionIds.storageBlobDataContributor)
  scope: idempotencyContainer
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.storageBlobDataContributor)
    principalId: principalId
    principalType: principalType
  }
}

// Replay markers of both replays (sb-replays/, eventgrid-replays/): read, created, updated,
// and deleted by a purge.
resource ledgersContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(ledgersContainer.id, principalId, roleDefinitionIds.storageBlobDataContributor)
  scope: ledgersContainer
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.storageBlobDataContributor)
    principalId: principalId
    principalType: principalType
  }
}

// usage lists the usage ledger's month documents and reads those of the range; it writes
// nothing there (the app alone counts usage and holds budgets): Reader.
resource usageReader 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(usageContainer.id, principalId, roleDefinitionIds.storageBlobDataReader)
  scope: usageContainer
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.storageBlobDataReader)
    principalId: principalId
    principalType: principalType
  }
}

// Event Grid replay of a BlobCreated event: intake reads the document's properties and
// content (its SHA-256) where it landed, and writes nothing there: Reader, this container
// only.
resource incomingReader 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(incomingContainer.id, principalId, roleDefinitionIds.storageBlobDataReader)
  scope: incomingContainer
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.storageBlobDataReader)
    principalId: principalId
    principalType: principalType
  }
}

// deadletters list|replay read Event Grid's dead-letter blobs; an operator deletes the ones
// dealt with by hand (the lifecycle rule of storage-data.bicep expires the rest).
resource deadLetterContributor 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(deadLetterContainer.id, principalId, roleDefinitionIds.storageBlobDataContributor)
  scope: deadLetterContainer
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.storageBlobDataContributor)
    principalId: principalId
    principalType: principalType
  }
}

// --- Service Bus: the request queues and the results topic's subscriptions ------------------

resource namespace 'Microsoft.ServiceBus/namespaces@2026-01-01' existing = {
  name: serviceBusNamespaceName
}

resource queues 'Microsoft.ServiceBus/namespaces/queues@2026-01-01' existing = [
  for queue in serviceBusQueues: {
    parent: namespace
    name: queue.name
  }
]

resource topic 'Microsoft.ServiceBus/namespaces/topics@2026-01-01' existing = {
  parent: namespace
  name: resultsTopicName
}

resource subscriptions 'Microsoft.ServiceBus/namespaces/topics/subscriptions@2026-01-01' existing = [
  for subscription in resultsSubscriptions: {
    parent: topic
    name: subscription.name
  }
]

// sb-deadletters list and show peek a queue's dead-letter sub-queue; purge receives and
// completes there. A role on the queue covers its sub-queue.
resource queueReceivers 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (queue, i) in serviceBusQueues: {
    name: guid(queues[i].id, principalId, roleDefinitionIds.serviceBusDataReceiver)
    scope: queues[i]
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.serviceBusDataReceiver)
      principalId: principalId
      principalType: principalType
    }
  }
]

// sb-deadletters replay sends a copy to the queue it came from; an Event Grid replay's
// request goes to the queue of its lane.
resource queueSenders 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (queue, i) in serviceBusQueues: {
    name: guid(queues[i].id, principalId, roleDefinitionIds.serviceBusDataSender)
    scope: queues[i]
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.serviceBusDataSender)
      principalId: principalId
      principalType: principalType
    }
  }
]

// sb-deadletters --subscription NAME: peek and purge a results subscription's dead letters,
// one subscription at a time.
resource subscriptionReceivers 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (subscription, i) in resultsSubscriptions: {
    name: guid(subscriptions[i].id, principalId, roleDefinitionIds.serviceBusDataReceiver)
    scope: subscriptions[i]
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.serviceBusDataReceiver)
      principalId: principalId
      principalType: principalType
    }
  }
]

// A subscription's replay sends its copy to the topic (nothing sends to one subscription).
resource topicSender 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(topic.id, principalId, roleDefinitionIds.serviceBusDataSender)
  scope: topic
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.serviceBusDataSender)
    principalId: principalId
    principalType: principalType
  }
}
