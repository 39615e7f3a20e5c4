// Event Grid topics. Their event subscriptions are created by
// infra/eventgrid-subscriptions.bicep after the code is deployed, because the webhook
// endpoints (and the blobs extension key) exist only then.
//
// - The storage system topic publishes BlobCreated events of the data account.
// - The custom topic takes CloudEvents 1.0 from the app; keys are disabled, so publishers
//   authenticate with Microsoft Entra ID (EventGrid Data Sender at topic scope).
// Both topics carry the Event Grid user-assigned identity, used to write dead-letters.

// Shared constants, fixed at compile time (role-definitions.json).
var roleDefinitionIds = loadJsonContent('role-definitions.json', '$.roleDefinitionIds')

@description('Azure region of the custom topic and the system topic (the data account region).')
param location string

@description('Name of the storage system topic.')
param systemTopicName string

@description('Name of the custom CloudEvents topic.')
param topicName string

@description('Resource id of the data storage account (the system topic source).')
param dataStorageAccountId string

@description('Resource id of the Event Grid user-assigned identity.')
param eventGridIdentityId string

@description('Principal id of the Function App identity (publisher on the custom topic).')
param appPrincipalId string

@description('Public network access: Enabled (the default) or Disabled (main.bicep\'s privateNetworking: reached through its private endpoints only).')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

@description('Tags applied to every resource.')
param tags object = {}

resource systemTopic 'Microsoft.EventGrid/systemTopics@2025-02-15' = {
  name: systemTopicName
  location: location
  tags: tags
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${eventGridIdentityId}': {}
    }
  }
  properties: {
    source: dataStorageAccountId
    topicType: 'Microsoft.Storage.StorageAccounts'
  }
}

resource topic 'Microsoft.EventGrid/topics@2025-02-15' = {
  name: topicName
  location: location
  tags: tags
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${eventGridIdentityId}': {}
    }
  }
  properties: {
    inputSchema: 'CloudEventSchemaV1_0'
    disableLocalAuth: true
    minimumTlsVersionAllowed: '1.2'
    publicNetworkAccess: publicNetworkAccess
  }
}

resource topicPublisher 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(topic.id, appPrincipalId, roleDefinitionIds.eventGridDataSender)
  scope: topic
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.eventGridDataSender)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

output systemTopicId string = systemTopic.id
output systemTopicName string = systemTopic.name
output topicId string = topic.id
output topicName string = topic.name
output topicEndpoint string = topic.properties.endpoint
