// Service Bus namespace with the request queues and the results topic.
// Entities, their properties and the subscription filters come from catalog.json, which
// mirrors infra/local/servicebus-emulator.json. Local (SAS) auth is disabled: every client
// authenticates with Microsoft Entra ID, and roles are granted per entity.

// Shared constants, fixed at compile time (catalog.json, role-definitions.json).
var queueNames = loadJsonContent('catalog.json', '$.queueNames')
var resultsTopic = loadJsonContent('catalog.json', '$.resultsTopic')
var serviceBusQueues = loadJsonContent('catalog.json', '$.serviceBusQueues')
var roleDefinitionIds = loadJsonContent('role-definitions.json', '$.roleDefinitionIds')

@description('Azure region of the namespace.')
param location string

@description('Namespace name.')
param name string

@description('Standard is enough for queues, topics, sessions and duplicate detection; Premium adds isolation, larger messages and predictable latency.')
@allowed([
  'Standard'
  'Premium'
])
param skuName string = 'Standard'

@description('Messaging units when skuName is Premium (ignored for Standard).')
@allowed([
  1
  2
  4
  8
  16
])
param premiumMessagingUnits int = 1

@description('Principal id of the Function App identity.')
param appPrincipalId string

@description('Grant Azure Service Bus Data Owner on each request queue and on the results topic (entity scope, never the namespace): the app reads their runtime properties (per-lane backpressure, the inferbus.queue.* gauges, the subscriptions\' dead letters) with the administration API, which needs Manage rights. false leaves the app blind to queue depths.')
param grantBacklogRead bool = true

@description('Public network access: Enabled (the default) or Disabled (main.bicep\'s privateNetworking: reached through its private endpoints only).')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

@description('Tags applied to every resource.')
param tags object = {}

resource namespace 'Microsoft.ServiceBus/namespaces@2026-01-01' = {
  name: name
  location: location
  tags: tags
  sku: {
    name: skuName
    tier: skuName
    capacity: (skuName == 'Premium') ? premiumMessagingUnits : null
  }
  properties: {
    disableLocalAuth: true
    minimumTlsVersion: '1.2'
    publicNetworkAccess: publicNetworkAccess
  }
}

resource queues 'Microsoft.ServiceBus/namespaces/queues@2026-01-01' = [
  for queue in serviceBusQueues: {
    parent: namespace
    name: queue.name
    properties: queue.properties
  }
]

resource topic 'Microsoft.ServiceBus/namespaces/topics@2026-01-01' = {
  parent: namespace
  name: resultsTopic.name
  properties: resultsTopic.properties
}

resource subscriptions 'Microsoft.ServiceBus/namespaces/topics/subscriptions@2026-01-01' = [
  for subscription in resultsTopic.subscriptions: {
    parent: topic
    name: subscription.name
    properties: subscription.properties
  }
]

// Creating the first rule through ARM replaces the implicit $Default (TrueFilter) rule of a
// new subscription; the audit subscription declares $Default itself.
resource rules 'Microsoft.ServiceBus/namespaces/topics/subscriptions/rules@2026-01-01' = [
  for (subscription, i) in resultsTopic.subscriptions: {
    parent: subscriptions[i]
    name: subscription.rule.name
    properties: subscription.rule.properties
  }
]

// The app receives from and sends to both queues (intake sends, the processor settles and
// re-schedules retries) and sends to the results topic. Consumers of the topic
// subscriptions are other applications and get their own Receiver assignments.
resource queueReceivers 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (queue, i) in serviceBusQueues: {
    name: guid(queues[i].id, appPrincipalId, roleDefinitionIds.serviceBusDataReceiver)
    scope: queues[i]
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.serviceBusDataReceiver)
      principalId: appPrincipalId
      principalType: 'ServicePrincipal'
    }
  }
]

resource queueSenders 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (queue, i) in serviceBusQueues: {
    name: guid(queues[i].id, appPrincipalId, roleDefinitionIds.serviceBusDataSender)
    scope: queues[i]
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.serviceBusDataSender)
      principalId: appPrincipalId
      principalType: 'ServicePrincipal'
    }
  }
]

resource topicSender 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(topic.id, appPrincipalId, roleDefinitionIds.serviceBusDataSender)
  scope: topic
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.serviceBusDataSender)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

// Reading runtime properties (active, scheduled and dead-lettered counts, the oldest
// message) is a management operation: Azure Service Bus Data Owner is the only built-in role
// with Manage. The app reads every request queue (per-lane backpressure, the queue gauges)
// and the results topic's subscriptions (their dead-letter counts), so it holds Data Owner on
// each of those entities, one assignment per entity, never on the namespace
// (infra/README.md, Service Bus rights per entity).
resource backlogReaders 'Microsoft.Authorization/roleAssignments@2022-04-01' = [
  for (queue, i) in serviceBusQueues: if (grantBacklogRead) {
    name: guid(queues[i].id, appPrincipalId, roleDefinitionIds.serviceBusDataOwner)
    scope: queues[i]
    properties: {
      roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.serviceBusDataOwner)
      principalId: appPrincipalId
      principalType: 'ServicePrincipal'
    }
  }
]

// The subscriptions' runtime properties: one assignment at the topic's scope covers every
// subscription of the results topic, which the app reads all of.
resource topicRuntimeReader 'Microsoft.Authorization/roleAssignments@2022-04-01' = if (grantBacklogRead) {
  name: guid(topic.id, appPrincipalId, roleDefinitionIds.serviceBusDataOwner)
  scope: topic
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.serviceBusDataOwner)
    principalId: appPrincipalId
    principalType: 'ServicePrincipal'
  }
}

output id string = namespace.id
output name string = namespace.name
// serviceBusEndpoint is https://<namespace>.servicebus.windows.net:443/ (cloud-specific suffix).
output fullyQualifiedNamespace string = split(split(namespace.properties.serviceBusEndpoint, '//')[1], ':')[0]
output requestsQueueName string = queueNames.requests
output priorityQueueName string = queueNames.priority
output orderedQueueName string = queueNames.ordered
output resultsTopicName string = topic.name
