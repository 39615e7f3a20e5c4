// Event Grid namespace (Standard tier): the pull door. The app's timer-triggered consumer
// receives com.inferbus.InferenceRequested CloudEvents from the queue event subscription
// app-pull of the namespace topic inference-requests (receive, acknowledge, release, reject,
// renew lock), and may publish its result CloudEvents to the namespace topic
// inference-results (EventGridTopic__namespaceTopic, parameter publishResultsToNamespace of
// main.bicep).
//
// API version 2025-02-15, the newest GA version of Microsoft.EventGrid/namespaces,
// namespaces/topics and namespaces/topics/eventSubscriptions (azure-rest-api-specs,
// specification/eventgrid/resource-manager/Microsoft.EventGrid/stable/2025-02-15/EventGrid.json:
// NamespaceProperties, NamespaceTopicProperties, SubscriptionProperties, QueueInfo,
// DeadLetterWithResourceIdentity).
//
// Local (key and SAS) authentication: NamespaceProperties has no disableLocalAuth, in
// 2025-02-15 nor in the newest preview (2025-07-15-preview), and Azure Policy has no
// built-in "disable local auth" definition for namespaces (it has one for topics, domains
// and partner namespaces). The namespace therefore keeps its two access keys; nothing in
// Inferbus reads them (tests/infra: no listKeys outside the second stage, no key setting in
// the app), and every client here authenticates with Microsoft Entra ID and the two data
// roles below.
//
// Topics and event subscriptions come from catalog.json (eventGridNamespace), which mirrors
// infra/local/eventgrid-namespace.json, the local emulator's config, minus its local-only
// keys. Every subscription is a queue (pull) subscription that dead-letters to the data
// account's eventgrid-deadletters container with the Event Grid user-assigned identity
// (Storage Blob Data Contributor on that container only, storage-data.bicep).
//
// No push (webhook) subscription: Microsoft documents webhook push delivery from namespace
// topics as preview (namespace push delivery overview: "Event Hubs, Webhooks (preview)";
// the namespace concepts page: push "currently supports Azure Event Hubs as a destination").

// Shared constants, fixed at compile time (catalog.json, role-definitions.json).
var eventGridNamespace = loadJsonContent('catalog.json', '$.eventGridNamespace')
var roleDefinitionIds = loadJsonContent('role-definitions.json', '$.roleDefinitionIds')

@description('Azure region of the namespace.')
param location string

@description('Namespace name (3-50 letters, digits and hyphens, unique in the region).')
@minLength(3)
@maxLength(50)
param name string

@description('Throughput units of the namespace (1 TU: 1 MB/s or 1,000 events/s ingress, 2 MB/s egress).')
@minValue(1)
@maxValue(20)
param capacity int = 1

@description('Zone-redundant namespace. Fixed at creation (it cannot be updated); set false in a region without availability zones.')
param isZoneRedundant bool = true

@description('Public network access of the namespace: Enabled (Entra ID only) or Disabled (main.bicep\'s privateNetworking: the app pulls through the namespace\'s private endpoint over its VNet integration).')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

@description('Resource id of the Event Grid user-assigned identity, which writes dead-lettered events.')
param eventGridIdentityId string

@description('Resource id of the data storage account (holds the dead-letter container).')
param dataStorageAccountId string

@description('Principal id of the Function App identity (receiver on the pull topic, sender on the results topic).')
param appPrincipalId string

@description('Tags applied to every resource.')
param tags object = {}

resource namespace 'Microsoft.EventGrid/namespaces@2025-02-15' = {
  name: name
  location: location
  tags: tags
  sku: {
    name: 'Standard'
    capacity: capacity
  }
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${eventGridIdentityId}': {}
    }
  }
  properties: {
    isZoneRedundant: isZoneRedundant
    publicNetworkAccess: publicNetworkAccess
    minimumTlsVersionAllowed: '1.2'
    // HTTP namespace topics only: the MQTT broker (topic spaces, client certificates) stays off.
    topicSpacesConfiguration: {
      state: 'Disabled'
    }
  }
}

resource topics 'Microsoft.EventGrid/namespaces/topics@2025-02-15' = [
  for topic in eventGridNamespace.topics: {
    parent: namespace
    name: topic.name
    properties: topic.properties
  }
]

// Bicep has no nested resource loops: one module per topic deploys its subscriptions.
module topicSubscriptions 'eventgrid-namespace-subscriptions.bicep' = [
  for (topic, i) in eventGridNamespace.topics: {
    name: 'evgns-subscriptions-${topic.name}'
    params: {
      namespaceName: namespace.name
      topicName: topics[i].name
      subscriptions: topic.eventSubscriptions
      eventGridIdentityId: eventGridIdentityId
      dataStorageAccountId: dataStorageAccountId
    }
  }
]

// The topics the app's roles are scoped to, created by the topics loop above.
resource pullTopic 'Microsoft.EventGrid/namespaces/topics@2025-02-15' existing = {
  parent: namespace
  name: eventGridNamespace.pullTopicName
}

resource resultsTopic 'Microsoft.EventGrid/namespaces/topics@2025-02-15' existing = {
  parent: namespace
  name: eventGridNamespace.resultsTopicName
}

// The pull consumer receives, acknowledges, releases, rejects and renews locks
// (Microsoft.EventGrid/events/receive/action). Scoped to the pull topic, whose only
// subscription is app-pull (tests/infra checks it), so the grant reaches that subscription
// alone: Microsoft documents topic (and wider) scopes for the Event Grid data roles, not
// event-subscription scopes.
resource pullReceiver 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(pullTopic.id, appPrincipalId, roleDefinitionIds.eventGridDataReceiver)
  scope: pullTopic
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.eventGridDataReceiver)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
  dependsOn: [
    topics
  ]
}

// The app publishes result CloudEvents here when EventGridTopic__namespaceTopic is set.
resource resultsSender 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(resultsTopic.id, appPrincipalId, roleDefinitionIds.eventGridDataSender)
  scope: resultsTopic
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.eventGridDataSender)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
  dependsOn: [
    topics
  ]
}

output id string = namespace.id
output name string = namespace.name
// The namespace's HTTP endpoint (topics and their subscriptions live below it).
output endpoint string = 'https://${namespace.properties.topicsConfiguration.hostname}'
output pullTopicName string = pullTopic.name
output pullSubscriptionName string = eventGridNamespace.pullSubscriptionName
output resultsTopicName string = resultsTopic.name
