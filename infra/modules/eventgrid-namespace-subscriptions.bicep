// The event subscriptions of one namespace topic (used by eventgrid-namespace.bicep, one
// module per topic: Bicep has no nested resource loops).
//
// API version 2025-02-15 (GA). Each subscription is deployed with its catalog.json
// properties unchanged, plus a dead-letter destination on its queue: the data account's
// eventgrid-deadletters container, written with the Event Grid user-assigned identity set on
// the namespace (QueueInfo.deadLetterDestinationWithResourceIdentity). Dead-lettered events
// land in <container>/<namespace>/<topic>/<subscription>/<yyyy>/<M>/<d>/<H>/<guid>.json.

// Shared constants, fixed at compile time (catalog.json).
var dataContainers = loadJsonContent('catalog.json', '$.dataContainers')

@description('Name of the Event Grid namespace.')
param namespaceName string

@description('Name of the namespace topic.')
param topicName string

@description('The topic\'s event subscriptions from catalog.json (eventGridNamespace.topics[].eventSubscriptions), all in Queue delivery mode.')
param subscriptions array

@description('Resource id of the Event Grid user-assigned identity (an identity of the namespace).')
param eventGridIdentityId string

@description('Resource id of the data storage account (holds the dead-letter container).')
param dataStorageAccountId string

resource namespace 'Microsoft.EventGrid/namespaces@2025-02-15' existing = {
  name: namespaceName
}

resource topic 'Microsoft.EventGrid/namespaces/topics@2025-02-15' existing = {
  parent: namespace
  name: topicName
}

var deadLetter = {
  identity: {
    type: 'UserAssigned'
    userAssignedIdentity: eventGridIdentityId
  }
  deadLetterDestination: {
    endpointType: 'StorageBlob'
    properties: {
      resourceId: dataStorageAccountId
      blobContainerName: dataContainers.eventGridDeadLetters
    }
  }
}

resource eventSubscriptions 'Microsoft.EventGrid/namespaces/topics/eventSubscriptions@2025-02-15' = [
  for subscription in subscriptions: {
    parent: topic
    name: subscription.name
    properties: union(subscription.properties, {
      deliveryConfiguration: union(subscription.properties.deliveryConfiguration, {
        queue: union(subscription.properties.deliveryConfiguration.queue, {
          deadLetterDestinationWithResourceIdentity: deadLetter
        })
      })
    })
  }
]
