// Event subscriptions of the storage system topic and of the custom CloudEvents topic.
//
// Delivery authentication:
// - Blob events go to the Functions blobs extension webhook, which requires its system key
//   (`code=` query parameter). Event Grid stores the endpoint URL as a secret.
// - Result CloudEvents go to the app's HTTP webhook (function-level auth, `code=`), with an
//   optional Microsoft Entra bearer token when the app is protected by App Service
//   authentication. Webhook destinations cannot use a managed identity.
// - Dead-letters are written by the Event Grid user-assigned identity
//   (deadLetterWithResourceIdentity), which is Storage Blob Data Contributor on the
//   dead-letter container only; the storage account accepts no keys.

// Shared constants, fixed at compile time (catalog.json).
var dataContainers = loadJsonContent('catalog.json', '$.dataContainers')

@description('Name of the storage system topic.')
param systemTopicName string

@description('Name of the custom CloudEvents topic.')
param topicName string

@description('Name of the data storage account (holds the dead-letter container).')
param dataStorageAccountName string

@description('Name of the Event Grid user-assigned identity.')
param eventGridIdentityName string

@description('Default host name of the Function App.')
param appHostName string

@description('Name of the blob-triggered function.')
param blobFunctionName string = 'blob_intake'

@description('Route of the CloudEvents webhook below /api.')
param eventsRoute string = 'v1/events'

@description('Create the custom topic subscriptions.')
param subscribeEventsWebhook bool = true

@description('Optional Microsoft Entra application id or URI for bearer-token delivery to the CloudEvents webhook.')
param webhookEntraApplicationIdOrUri string = ''

@description('System key of the blobs extension (blobs_extension).')
@secure()
param blobsExtensionKey string

@description('A function-level key of the app (the default host function key).')
@secure()
param functionKey string

@description('Delivery attempts before an event is dead-lettered (1-30).')
@minValue(1)
@maxValue(30)
param maxDeliveryAttempts int = 30

@description('Minutes an event is retried before it is dead-lettered (1-1440).')
@minValue(1)
@maxValue(1440)
param eventTimeToLiveInMinutes int = 1440

resource systemTopic 'Microsoft.EventGrid/systemTopics@2025-02-15' existing = {
  name: systemTopicName
}

resource topic 'Microsoft.EventGrid/topics@2025-02-15' existing = {
  name: topicName
}

resource dataStorage 'Microsoft.Storage/storageAccounts@2026-04-01' existing = {
  name: dataStorageAccountName
}

resource eventGridIdentity 'Microsoft.ManagedIdentity/userAssignedIdentities@2024-11-30' existing = {
  name: eventGridIdentityName
}

var deadLetter = {
  identity: {
    type: 'UserAssigned'
    userAssignedIdentity: eventGridIdentity.id
  }
  deadLetterDestination: {
    endpointType: 'StorageBlob'
    properties: {
      resourceId: dataStorage.id
      blobContainerName: dataContainers.eventGridDeadLetters
    }
  }
}

var retryPolicy = {
  maxDeliveryAttempts: maxDeliveryAttempts
  eventTimeToLiveInMinutes: eventTimeToLiveInMinutes
}

var entraDelivery = empty(webhookEntraApplicationIdOrUri) ? {} : {
  azureActiveDirectoryTenantId: tenant().tenantId
  azureActiveDirectoryApplicationIdOrUri: webhookEntraApplicationIdOrUri
}

// Only blobs created in the incoming container trigger intake: the app's own containers
// (inputs, jobs, ledgers...) never re-trigger it.
resource blobCreated 'Microsoft.EventGrid/systemTopics/eventSubscriptions@2025-02-15' = {
  parent: systemTopic
  name: 'blob-intake'
  properties: {
    destination: {
      endpointType: 'WebHook'
      properties: {
        endpointUrl: 'https://${appHostName}/runtime/webhooks/blobs?functionName=Host.Functions.${blobFunctionName}&code=${blobsExtensionKey}'
        maxEventsPerBatch: 1
        preferredBatchSizeInKilobytes: 64
        minimumTlsVersionAllowed: '1.2'
      }
    }
    eventDeliverySchema: 'EventGridSchema'
    filter: {
      includedEventTypes: [
        'Microsoft.Storage.BlobCreated'
      ]
      subjectBeginsWith: '/blobServices/default/containers/${dataContainers.incoming}/'
      isSubjectCaseSensitive: true
    }
    retryPolicy: retryPolicy
    deadLetterWithResourceIdentity: deadLetter
  }
}

// Terminal results the app reacts to (notifications, bookkeeping).
resource terminalResults 'Microsoft.EventGrid/topics/eventSubscriptions@2025-02-15' = if (subscribeEventsWebhook) {
  parent: topic
  name: 'app-terminal-results'
  properties: {
    destination: {
      endpointType: 'WebHook'
      properties: union({
        endpointUrl: 'https://${appHostName}/api/${eventsRoute}?code=${functionKey}'
        maxEventsPerBatch: 1
        preferredBatchSizeInKilobytes: 64
        minimumTlsVersionAllowed: '1.2'
      }, entraDelivery)
    }
    eventDeliverySchema: 'CloudEventSchemaV1_0'
    filter: {
      includedEventTypes: [
        'com.inferbus.InferenceCompleted'
        'com.inferbus.InferenceFailed'
      ]
      advancedFilters: [
        {
          operatorType: 'StringIn'
          key: 'data.status'
          values: [
            'completed'
            'failed'
            'expired'
            'cancelled'
          ]
        }
      ]
    }
    retryPolicy: retryPolicy
    deadLetterWithResourceIdentity: deadLetter
  }
}

// Results flagged for human review.
resource reviewRequired 'Microsoft.EventGrid/topics/eventSubscriptions@2025-02-15' = if (subscribeEventsWebhook) {
  parent: topic
  name: 'app-review-required'
  properties: {
    destination: {
      endpointType: 'WebHook'
      properties: union({
        endpointUrl: 'https://${appHostName}/api/${eventsRoute}?code=${functionKey}'
        maxEventsPerBatch: 1
        preferredBatchSizeInKilobytes: 64
        minimumTlsVersionAllowed: '1.2'
      }, entraDelivery)
    }
    eventDeliverySchema: 'CloudEventSchemaV1_0'
    filter: {
      includedEventTypes: [
        'com.inferbus.InferenceCompleted'
      ]
      advancedFilters: [
        {
          operatorType: 'BoolEquals'
          key: 'data.review_required'
          value: true
        }
      ]
    }
    retryPolicy: retryPolicy
    deadLetterWithResourceIdentity: deadLetter
  }
}

output blobSubscriptionName string = blobCreated.name
