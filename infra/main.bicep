// Inferbus: the whole system in one resource group.
//
//   az deployment group create -g <rg> -f infra/main.bicep -p infra/main.parameters.json
//   azd up        (azure.yaml; azd reads infra/main.bicepparam, not main.parameters.json)
//
// Event Grid event subscriptions are a second deployment
// (infra/eventgrid-subscriptions.bicep), run after the code is published, because the
// webhook endpoints and the blobs extension key exist only then (azd runs it as its
// postdeploy hook, infra/hooks/). See infra/README.md.

// azd deploys a resource-group scoped template into AZURE_RESOURCE_GROUP.
targetScope = 'resourceGroup'

@description('Short environment name used in resource names, e.g. inferbus-dev.')
@minLength(2)
@maxLength(20)
param environmentName string

// The regions that offer Flex Consumption (az functionapp list-flexconsumption-locations;
// infra/README.md, "Regions"): azd offers only these when it asks for AZURE_LOCATION.
@description('Azure region; one that offers Flex Consumption.')
@allowed([
  'australiaeast'
  'australiasoutheast'
  'brazilsouth'
  'canadacentral'
  'centralindia'
  'centralus'
  'eastasia'
  'eastus'
  'eastus2'
  'francecentral'
  'germanywestcentral'
  'italynorth'
  'japaneast'
  'koreacentral'
  'northcentralus'
  'northeurope'
  'norwayeast'
  'southafricanorth'
  'southcentralus'
  'southeastasia'
  'southindia'
  'spaincentral'
  'swedencentral'
  'uaenorth'
  'uksouth'
  'ukwest'
  'westcentralus'
  'westeurope'
  'westus'
  'westus2'
  'westus3'
])
@metadata({
  azd: {
    type: 'location'
  }
})
param location string = resourceGroup().location

@description('Service Bus tier: Standard by default, Premium for isolation and larger messages. privateNetworking deploys Premium whatever this says (only Premium has private endpoints).')
@allowed([
  'Standard'
  'Premium'
])
param serviceBusSku string = 'Standard'

@description('Messaging units when Service Bus is Premium (serviceBusSku Premium, or privateNetworking); each unit is billed by the hour (infra/README.md, Private networking).')
@allowed([
  1
  2
  4
  8
  16
])
param serviceBusPremiumMessagingUnits int = 1

@description('Grant Azure Service Bus Data Owner (the only built-in role with Manage) on each request queue and on the results topic, entity by entity, so the app can read their runtime properties: per-lane backpressure, the inferbus.queue.* gauges and the alerts on them (infra/README.md, Service Bus rights per entity).')
param serviceBusGrantBacklogRead bool = true

@description('Upper bound of Function App instances (Flex Consumption\'s lowest is 40). The model quota is shared out by the live instances, so no count of instances asks a deployment for more than its quota (infra/README.md, Model capacity).')
@minValue(40)
@maxValue(1000)
param maximumInstanceCount int = 40

@description('Memory per instance in MB.')
@allowed([
  512
  2048
  4096
])
param instanceMemoryMB int = 2048

@description('Concurrent HTTP requests per instance.')
@minValue(1)
@maxValue(1000)
param httpPerInstanceConcurrency int = 16

@description('Service Bus maxConcurrentCalls per instance; 0 keeps host.json.')
@minValue(0)
param serviceBusMaxConcurrentCalls int = 0

@description('Optional always-ready instances, e.g. [{ name: \'http\', instanceCount: 1 }]. Empty scales to zero.')
param alwaysReady array = []

@description('Application (client) id of the Entra app registration of the Inferbus API; App Service authentication validates callers\' tokens against it (the tenant claim of the token selects the tenant). With azd, the preprovision hook (infra/hooks/api_registration.py) creates or reuses one unless INFERBUS_API_CLIENT_ID names it.')
@minLength(36)
@maxLength(36)
param apiClientId string

@description('Token audiences the API accepts; empty accepts the client id and api://<client id>.')
param apiAudiences array = []

@description('Comma-separated model aliases the app serves (AllowedModels); with modelProvider azure_openai each is a deployment of queueModelName of the same name. Empty: queueModelName (azure_openai) or local-analyzer (local).')
param allowedModels string = ''

@description('A model catalog file shipped with the app, relative to its root (ModelCatalog), for tasks, providers and deployments of your own; empty serves allowedModels through modelProvider. With a catalog no queue-lane model is deployed here: the catalog names its own.')
param modelCatalog string = ''

@description('Tenants a producer sending straight to the request queues may name (ProducerTenants), comma-separated. Empty (the default): none, so a direct producer\'s message is dead-lettered TenantNotAllowed until its tenant is listed; callers of the HTTP API, blob and Event Grid doors are unaffected.')
param producerTenants string = ''

@description('Model for work that names none (documents dropped in the incoming container); one of allowedModels. Empty means the first of allowedModels.')
param defaultModel string = ''

@description('Application ID URI that Event Grid requests Entra tokens for on the events webhook (the same value as webhookEntraApplicationIdOrUri of the second stage); empty disables token validation.')
param webhookTokenAudience string = ''

@description('Issuer of those tokens, e.g. https://sts.windows.net/<tenant id>/.')
param webhookTokenIssuer string = ''

@description('Concurrent model calls per instance (ModelConcurrency); 0 (the default) derives it from the deployment\'s capacity, modelTokensPerCall and modelCallSeconds: twice the calls in flight when one instance has the whole quota, between 2 and 64, or 16 when the capacity is unknown (infra/README.md, Model capacity). A positive value overrides it.')
@minValue(0)
@maxValue(256)
param modelConcurrency int = 0

@description('Tokens of a typical model call, prompt and answer together (1,000: a 3,000-character document analysed); with the capacity it gives the calls a minute the quota serves, which derive ModelConcurrency when modelConcurrency is 0.')
@minValue(1)
param modelTokensPerCall int = 1000

@description('Seconds of a typical model call, from request to answer; the calls a minute at the quota times this gives the calls in flight, which derive ModelConcurrency when modelConcurrency is 0.')
@minValue(1)
param modelCallSeconds int = 5

@description('Capacity, in thousands of tokens per minute, of the deployments behind azureOpenAIEndpoint (ModelCapacity__*); 0: none. Ignored when the queue lane\'s model is deployed here: its budget is then queueModelCapacity.')
@minValue(0)
param modelCapacity int = 0

@description('ModelProvider, the one-provider shorthand of the model catalog with allowedModels: azure_openai (the default: a model deployed here, or azureOpenAIEndpoint) or local, the deterministic local stand-in, only when asked for (the MODEL_WARNING output says so).')
@allowed([
  'azure_openai'
  'local'
])
param modelProvider string = 'azure_openai'

@description('An existing Azure OpenAI endpoint to serve allowedModels from instead of deploying a model here (grant the app identity Cognitive Services OpenAI User on that resource); empty deploys one.')
param azureOpenAIEndpoint string = ''

// The queue lane's model (modules/openai-chat.bicep): deployed into the Azure OpenAI account
// oai-<environment>-<token> when modelProvider is azure_openai and neither azureOpenAIEndpoint
// nor modelCatalog brings one. The default, gpt-5.1 2025-11-13, is GA, offered as Global
// Standard and Global Batch in every listed region, and retires last of the models Global
// Batch offers (docs/deploy.md, Models).

@description('Model of the queue lane\'s deployments (it must offer queueModelSku in the region).')
param queueModelName string = 'gpt-5.1'

@description('Version of that model.')
param queueModelVersion string = '2025-11-13'

@description('Deployment type of the queue lane\'s model: GlobalStandard, DataZoneStandard or Standard.')
@allowed([
  'GlobalStandard'
  'DataZoneStandard'
  'Standard'
])
param queueModelSku string = 'GlobalStandard'

@description('Capacity of each queue-lane deployment in thousands of tokens per minute, within the subscription\'s quota for the model and SKU; the app\'s budget follows it (ModelCapacity__tokensPerMinute x 1000, __requestsPerMinute x 6).')
@minValue(1)
param queueModelCapacity int = 30

@description('Extra or overriding app settings, applied last.')
param appSettingOverrides object = {}

// Global Batch lane (modules/openai-batch.bicep, infra/README.md): off by default, so a
// default deployment needs no Azure OpenAI quota.

@description('Deploy a Global Batch model deployment and turn the app\'s batch lane on (GlobalBatch__deployments).')
param globalBatchEnabled bool = false

@description('Existing Azure OpenAI account of this resource group to deploy into; empty creates one (oai-<environment>-<token>).')
param globalBatchAccountName string = ''

@description('Model of the Global Batch deployment (it must offer the GlobalBatch SKU in the account\'s region).')
param globalBatchModelName string = 'gpt-5.1'

@description('Version of that model.')
param globalBatchModelVersion string = '2025-11-13'

@description('Capacity of the Global Batch deployment: its enqueued-token quota in thousands of tokens, within the subscription\'s quota for the model.')
@minValue(1)
param globalBatchCapacity int = 50

@description('Model alias callers name for the batch lane (GlobalBatch__deployments maps it to the deployment); one of allowedModels. Empty: the first served alias.')
param globalBatchModelAlias string = ''

@description('Days a blob of the batches container (pending requests, submissions, the tenant ledger, copies of the service\'s output files) is kept after its last change; the copies are the platform\'s record of the service\'s output, which the service itself keeps 14 to 30 days.')
@minValue(30)
param batchRetentionDays int = 90

// Retention (lifecycle delete rules on the data account, modules/storage-data.bicep): days
// after a blob's last modification. Rules run about once a day, so deletion lags by a day or
// two. The longest request deadline (MaxDeadlineSeconds) is 1 day: a request's input, its job
// and its ledger entries must outlive it, hence minValue 2.

@description('Days a document dropped in the incoming container is kept; it is the input of the job it starts, so it must outlive the longest request deadline (1 day).')
@minValue(2)
param incomingRetentionDays int = 7

@description('Days a claim-check input is kept in the inputs container; it must outlive the longest request deadline (1 day).')
@minValue(2)
param inputsRetentionDays int = 30

@description('Days a job document, which holds its result, is kept after its last update; the app answers 410 Gone for an older request id whose job is gone (JobRetentionDays).')
@minValue(2)
param jobsRetentionDays int = 90

@description('Days an Idempotency-Key marker is kept: a retried request with the same key is recognised for at least this long.')
@minValue(1)
param idempotencyRetentionDays int = 1

@description('Days deferral ledger entries and Event Grid replay markers are kept in the ledgers container; at least the longest request deadline (1 day), and no shorter than the 30 days dead-lettered events are kept, so a replayed event is never replayed twice.')
@minValue(2)
param ledgersRetentionDays int = 30

@description('Days a tenant\'s month of usage (tokens and cost per model, lane and day; the budgets\' counter) is kept in the usage container after its last change: a year and a month by default, for yearly chargeback.')
@minValue(62)
param usageRetentionDays int = 400

@description('Resource id of an existing action group notified by every alert; empty creates the alerts without notifications.')
param actionGroupId string = ''

@description('Age in seconds of the oldest waiting message of a request queue above which an alert fires.')
@minValue(60)
param oldestMessageAgeThresholdSeconds int = 900

@description('Messages added to the dead-letter sub-queue of one request queue within 15 minutes above which an alert fires.')
@minValue(0)
param deadLetterGrowthThreshold int = 0

@description('Percentage of one door\'s submissions refused within 15 minutes above which an alert fires.')
@minValue(1)
@maxValue(100)
param refusalRateThresholdPercent int = 25

@description('Percentage of one lane\'s request messages dead-lettered within 15 minutes above which an alert fires.')
@minValue(1)
@maxValue(100)
param failureRateThresholdPercent int = 5

@description('Percentage of one of a tenant\'s budgets (tenant catalog) used in its period at or above which an alert fires.')
@minValue(1)
@maxValue(100)
param budgetUtilizationThresholdPercent int = 80

@description('Accept only Microsoft Entra authenticated telemetry in Application Insights.')
param appInsightsDisableLocalAuth bool = false

@description('Zone-redundant Event Grid namespace (the pull door) where the region has availability zones (regionsWithZones). Fixed when the namespace is created.')
param eventGridNamespaceZoneRedundant bool = true

@description('Private networking (infra/README.md, Private networking): a virtual network, the app\'s Flex Consumption VNet integration, private endpoints and private DNS zones for Service Bus (Premium), both storage accounts, the Event Grid topic and namespace and the Azure OpenAI account, each with public network access disabled. Off by default.')
param privateNetworking bool = false

@description('Public network access of the Event Grid namespace when privateNetworking is false: Enabled (Entra ID only) or Disabled. privateNetworking disables it and adds a private endpoint.')
@allowed([
  'Enabled'
  'Disabled'
])
param eventGridNamespacePublicNetworkAccess string = 'Enabled'

@description('Publish result CloudEvents to the Event Grid namespace topic inference-results instead of the custom topic (EventGridTopic__topicEndpoint becomes the namespace endpoint, EventGridTopic__namespaceTopic the topic name).')
param publishResultsToNamespace bool = false

// The operators' commands (python -m shared.ops: dead letters, replays, usage, jobs reindex)
// run in Azure as a person or a group, with the data roles of modules/operator-roles.bicep.

@description('Object id of a user, group or service principal granted the data roles the operators\' commands need (python -m shared.ops: dead letters, replays, usage, jobs reindex), each on its container or Service Bus entity (docs/operations.md, Roles for operators). Empty: no grant. azd passes the signed-in principal (AZURE_PRINCIPAL_ID).')
param operatorPrincipalId string = ''

@description('Type of operatorPrincipalId: User (azd\'s signed-in user), Group or ServicePrincipal.')
@allowed([
  'User'
  'Group'
  'ServicePrincipal'
])
param operatorPrincipalType string = 'User'

@description('Tags applied to every resource.')
param tags object = {}

var token = toLower(uniqueString(subscription().id, resourceGroup().id, environmentName))
// Every resource name derives from the environment name and a deterministic token, so this
// template and the second stage (eventgrid-subscriptions.bicep, which repeats the names it
// needs) agree without passing names around; tests/infra/test_azd.py keeps both in step.
var names = {
  appIdentity: 'id-${environmentName}-app'
  eventGridIdentity: 'id-${environmentName}-eventgrid'
  logAnalytics: 'log-${environmentName}-${token}'
  appInsights: 'appi-${environmentName}-${token}'
  hostStorage: take('sthost${token}', 24)
  dataStorage: take('stdata${token}', 24)
  serviceBus: 'sb-${environmentName}-${token}'
  eventGridSystemTopic: 'evgst-${environmentName}-storage'
  eventGridTopic: 'evgt-${environmentName}-${token}'
  eventGridNamespace: 'evgns-${environmentName}-${token}'
  plan: 'plan-${environmentName}-${token}'
  functionApp: 'func-${environmentName}-${token}'
  openAI: 'oai-${environmentName}-${token}'
  virtualNetwork: 'vnet-${environmentName}-${token}'
}
// The regions of the location list with availability zones: zone redundancy is asked for
// only there (Azure refuses it elsewhere).
var regionsWithZones = [
  'australiaeast'
  'brazilsouth'
  'canadacentral'
  'centralindia'
  'centralus'
  'eastasia'
  'eastus'
  'eastus2'
  'francecentral'
  'germanywestcentral'
  'italynorth'
  'japaneast'
  'koreacentral'
  'northeurope'
  'norwayeast'
  'southafricanorth'
  'southcentralus'
  'southeastasia'
  'spaincentral'
  'swedencentral'
  'uaenorth'
  'uksouth'
  'westeurope'
  'westus2'
  'westus3'
]
var zoneRedundant = contains(regionsWithZones, location)
// The Global Batch deployment the batch lane submits to, named after its model.
var globalBatchDeploymentName = '${globalBatchModelName}-batch'
// The queue lane's model is deployed here unless the app is told to use the local stand-in,
// an existing endpoint or a catalog of its own.
var queueModelDeployed = (modelProvider == 'azure_openai') && empty(azureOpenAIEndpoint) && empty(modelCatalog)
// The aliases the app serves; each is the name of its deployment (the shorthand's rule).
var localModelAlias = 'local-analyzer'
var defaultAlias = (modelProvider == 'local') ? localModelAlias : queueModelName
var servedModels = empty(allowedModels) ? defaultAlias : replace(allowedModels, ' ', '')
var servedAliases = split(servedModels, ',')
var batchModelAlias = empty(globalBatchModelAlias) ? servedAliases[0] : globalBatchModelAlias
// One Azure OpenAI account serves both lanes unless the batch lane names its own.
var createOpenAIAccount = queueModelDeployed || (globalBatchEnabled && empty(globalBatchAccountName))
var batchAccountName = empty(globalBatchAccountName) ? names.openAI : globalBatchAccountName
// Public network access of every service when privateNetworking is on, and Service Bus's
// tier (only Premium has private endpoints).
var servicePublicNetworkAccess = privateNetworking ? 'Disabled' : 'Enabled'
var serviceBusTier = privateNetworking ? 'Premium' : serviceBusSku
var allTags = union(tags, {
  application: 'inferbus'
  environment: environmentName
})

// The service of azure.yaml that holds the app's code: azd deploy finds the Function App by
// this tag, which no other resource carries (tests/infra/test_azd.py keeps both in step).
var azdServiceName = 'inferbus'

module identities 'modules/identities.bicep' = {
  name: 'identities'
  params: {
    location: location
    appIdentityName: names.appIdentity
    eventGridIdentityName: names.eventGridIdentity
    tags: allTags
  }
}

module monitoring 'modules/monitoring.bicep' = {
  name: 'monitoring'
  params: {
    location: location
    logAnalyticsName: names.logAnalytics
    appInsightsName: names.appInsights
    disableLocalAuth: appInsightsDisableLocalAuth
    tags: allTags
  }
}

module hostStorage 'modules/storage-host.bicep' = {
  name: 'storage-host'
  params: {
    location: location
    name: names.hostStorage
    appPrincipalId: identities.outputs.appIdentityPrincipalId
    publicNetworkAccess: servicePublicNetworkAccess
    tags: allTags
  }
}

module dataStorage 'modules/storage-data.bicep' = {
  name: 'storage-data'
  params: {
    location: location
    name: names.dataStorage
    appPrincipalId: identities.outputs.appIdentityPrincipalId
    eventGridPrincipalId: identities.outputs.eventGridIdentityPrincipalId
    incomingRetentionDays: incomingRetentionDays
    inputsRetentionDays: inputsRetentionDays
    jobsRetentionDays: jobsRetentionDays
    idempotencyRetentionDays: idempotencyRetentionDays
    ledgersRetentionDays: ledgersRetentionDays
    usageRetentionDays: usageRetentionDays
    batchRetentionDays: batchRetentionDays
    publicNetworkAccess: servicePublicNetworkAccess
    tags: allTags
  }
}

module serviceBus 'modules/servicebus.bicep' = {
  name: 'servicebus'
  params: {
    location: location
    name: names.serviceBus
    skuName: serviceBusTier
    premiumMessagingUnits: serviceBusPremiumMessagingUnits
    grantBacklogRead: serviceBusGrantBacklogRead
    publicNetworkAccess: servicePublicNetworkAccess
    appPrincipalId: identities.outputs.appIdentityPrincipalId
    tags: allTags
  }
}

module eventGrid 'modules/eventgrid-topics.bicep' = {
  name: 'eventgrid-topics'
  params: {
    location: location
    systemTopicName: names.eventGridSystemTopic
    topicName: names.eventGridTopic
    dataStorageAccountId: dataStorage.outputs.id
    eventGridIdentityId: identities.outputs.eventGridIdentityId
    publicNetworkAccess: servicePublicNetworkAccess
    appPrincipalId: identities.outputs.appIdentityPrincipalId
    tags: allTags
  }
}

module eventGridNamespace 'modules/eventgrid-namespace.bicep' = {
  name: 'eventgrid-namespace'
  params: {
    location: location
    name: names.eventGridNamespace
    isZoneRedundant: eventGridNamespaceZoneRedundant && zoneRedundant
    publicNetworkAccess: privateNetworking ? 'Disabled' : eventGridNamespacePublicNetworkAccess
    eventGridIdentityId: identities.outputs.eventGridIdentityId
    dataStorageAccountId: dataStorage.outputs.id
    appPrincipalId: identities.outputs.appIdentityPrincipalId
    tags: allTags
  }
}

// The operators' data roles, on the containers and entities the modules above create.
module operatorRoles 'modules/operator-roles.bicep' = if (!empty(operatorPrincipalId)) {
  name: 'operator-roles'
  params: {
    principalId: operatorPrincipalId
    principalType: operatorPrincipalType
    dataStorageAccountName: dataStorage.outputs.name
    serviceBusNamespaceName: serviceBus.outputs.name
  }
}

// The account comes from its own module: checkov reads the properties of an unconditional
// resource only, and the account's (no keys, network access) must be checked.
module openAIAccount 'modules/openai-account.bicep' = if (createOpenAIAccount) {
  name: 'openai-account'
  params: {
    location: location
    name: names.openAI
    publicNetworkAccess: servicePublicNetworkAccess
    tags: allTags
  }
}

module openAIChat 'modules/openai-chat.bicep' = if (queueModelDeployed) {
  name: 'openai-chat'
  params: {
    accountName: names.openAI
    deploymentNames: servedAliases
    modelName: queueModelName
    modelVersion: queueModelVersion
    skuName: queueModelSku
    capacity: queueModelCapacity
    appPrincipalId: identities.outputs.appIdentityPrincipalId
  }
  dependsOn: [
    openAIAccount
  ]
}

// After the queue lane's deployments: an account takes one deployment operation at a time,
// and both lanes hold the same role assignment when they share the account.
module openAIBatch 'modules/openai-batch.bicep' = if (globalBatchEnabled) {
  name: 'openai-batch'
  params: {
    accountName: batchAccountName
    deploymentName: globalBatchDeploymentName
    modelName: globalBatchModelName
    modelVersion: globalBatchModelVersion
    capacity: globalBatchCapacity
    appPrincipalId: identities.outputs.appIdentityPrincipalId
  }
  dependsOn: [
    openAIAccount
    openAIChat
  ]
}

// Private networking (modules/network.bicep, modules/private-endpoint.bicep): one private
// endpoint per service and sub-resource the app reaches, in the virtual network the app's
// outbound traffic goes through. Event Grid still delivers to the app's webhooks over the
// app's public inbound endpoint (infra/README.md, Private networking).
module network 'modules/network.bicep' = if (privateNetworking) {
  name: 'network'
  params: {
    location: location
    name: names.virtualNetwork
    tags: allTags
  }
}

// Each private endpoint: the service (named, as a loop's items must be known when the
// deployment starts), its sub-resource (group id) and the DNS zone of that sub-resource.
var privateEndpoints = [
  {
    key: 'sb'
    serviceId: resourceId('Microsoft.ServiceBus/namespaces', names.serviceBus)
    groupId: 'namespace'
    zone: 'serviceBus'
  }
  {
    key: 'sthost-blob'
    serviceId: resourceId('Microsoft.Storage/storageAccounts', names.hostStorage)
    groupId: 'blob'
    zone: 'blob'
  }
  {
    key: 'sthost-queue'
    serviceId: resourceId('Microsoft.Storage/storageAccounts', names.hostStorage)
    groupId: 'queue'
    zone: 'queue'
  }
  {
    key: 'sthost-table'
    serviceId: resourceId('Microsoft.Storage/storageAccounts', names.hostStorage)
    groupId: 'table'
    zone: 'table'
  }
  {
    key: 'stdata-blob'
    serviceId: resourceId('Microsoft.Storage/storageAccounts', names.dataStorage)
    groupId: 'blob'
    zone: 'blob'
  }
  {
    key: 'stdata-queue'
    serviceId: resourceId('Microsoft.Storage/storageAccounts', names.dataStorage)
    groupId: 'queue'
    zone: 'queue'
  }
  {
    key: 'evgt'
    serviceId: resourceId('Microsoft.EventGrid/topics', names.eventGridTopic)
    groupId: 'topic'
    zone: 'eventGrid'
  }
  {
    key: 'evgns'
    serviceId: resourceId('Microsoft.EventGrid/namespaces', names.eventGridNamespace)
    groupId: 'topic'
    zone: 'eventGrid'
  }
]

module privateEndpoint 'modules/private-endpoint.bicep' = [
  for endpoint in privateEndpoints: if (privateNetworking) {
    name: 'pe-${endpoint.key}'
    params: {
      location: location
      name: 'pe-${environmentName}-${endpoint.key}'
      subnetId: network.outputs.privateEndpointSubnetId
      serviceId: endpoint.serviceId
      groupId: endpoint.groupId
      privateDnsZoneIds: [
        network.outputs.zoneIds[endpoint.zone]
      ]
      tags: allTags
    }
    dependsOn: [
      serviceBus
      hostStorage
      dataStorage
      eventGrid
      eventGridNamespace
    ]
  }
]

// The Azure OpenAI account's, when this deployment creates it (an existing account of
// azureOpenAIEndpoint or globalBatchAccountName brings its own network setup).
module openAIPrivateEndpoint 'modules/private-endpoint.bicep' = if (privateNetworking && createOpenAIAccount) {
  name: 'pe-oai'
  params: {
    location: location
    name: 'pe-${environmentName}-oai'
    subnetId: network.outputs.privateEndpointSubnetId
    serviceId: openAIAccount.outputs.id
    groupId: 'account'
    privateDnsZoneIds: [
      network.outputs.zoneIds.openAI
      network.outputs.zoneIds.cognitiveServices
    ]
    tags: allTags
  }
}

module functionApp 'modules/function-app.bicep' = {
  name: 'function-app'
  params: {
    location: location
    apiTokenAudience: empty(apiAudiences) ? apiClientId : apiAudiences[0]
    planName: names.plan
    appName: names.functionApp
    appIdentityId: identities.outputs.appIdentityId
    appIdentityClientId: identities.outputs.appIdentityClientId
    appIdentityPrincipalId: identities.outputs.appIdentityPrincipalId
    hostStorageAccountName: hostStorage.outputs.name
    deploymentContainerUrl: hostStorage.outputs.deploymentContainerUrl
    dataBlobEndpoint: dataStorage.outputs.blobEndpoint
    dataQueueEndpoint: dataStorage.outputs.queueEndpoint
    serviceBusFullyQualifiedNamespace: serviceBus.outputs.fullyQualifiedNamespace
    virtualNetworkSubnetId: privateNetworking ? network.outputs.appSubnetId : ''
    appInsightsName: monitoring.outputs.appInsightsName
    eventGridTopicEndpoint: publishResultsToNamespace ? eventGridNamespace.outputs.endpoint : eventGrid.outputs.topicEndpoint
    eventGridNamespaceTopic: publishResultsToNamespace ? eventGridNamespace.outputs.resultsTopicName : ''
    eventGridPullNamespaceEndpoint: eventGridNamespace.outputs.endpoint
    eventGridPullTopicName: eventGridNamespace.outputs.pullTopicName
    eventGridPullSubscriptionName: eventGridNamespace.outputs.pullSubscriptionName
    maximumInstanceCount: maximumInstanceCount
    instanceMemoryMB: instanceMemoryMB
    httpPerInstanceConcurrency: httpPerInstanceConcurrency
    serviceBusMaxConcurrentCalls: serviceBusMaxConcurrentCalls
    alwaysReady: alwaysReady
    allowedModels: servedModels
    modelCatalog: modelCatalog
    producerTenants: producerTenants
    defaultModel: defaultModel
    webhookTokenAudience: webhookTokenAudience
    webhookTokenIssuer: webhookTokenIssuer
    modelConcurrency: modelConcurrency
    modelTokensPerCall: modelTokensPerCall
    modelCallSeconds: modelCallSeconds
    modelCapacity: queueModelDeployed ? queueModelCapacity : modelCapacity
    jobsRetentionDays: jobsRetentionDays
    modelProvider: modelProvider
    azureOpenAIEndpoint: queueModelDeployed ? openAIChat.outputs.endpoint : azureOpenAIEndpoint
    globalBatchDeployments: globalBatchEnabled ? '${batchModelAlias}=${globalBatchDeploymentName}' : ''
    globalBatchEndpoint: globalBatchEnabled ? openAIBatch.outputs.endpoint : ''
    globalBatchCapacity: globalBatchEnabled ? globalBatchCapacity : 0
    appSettingOverrides: appSettingOverrides
    tags: allTags
    siteTags: {
      'azd-service-name': azdServiceName
    }
  }
}

module authentication 'modules/app-authentication.bicep' = {
  name: 'app-authentication'
  params: {
    appName: functionApp.outputs.name
    apiClientId: apiClientId
    allowedAudiences: apiAudiences
  }
}

module alerts 'modules/alerts.bicep' = {
  name: 'alerts'
  params: {
    location: location
    namePrefix: environmentName
    actionGroupId: actionGroupId
    serviceBusNamespaceId: serviceBus.outputs.id
    systemTopicId: eventGrid.outputs.systemTopicId
    topicId: eventGrid.outputs.topicId
    appInsightsId: monitoring.outputs.appInsightsId
    oldestMessageAgeThresholdSeconds: oldestMessageAgeThresholdSeconds
    deadLetterGrowthThreshold: deadLetterGrowthThreshold
    refusalRateThresholdPercent: refusalRateThresholdPercent
    failureRateThresholdPercent: failureRateThresholdPercent
    budgetUtilizationThresholdPercent: budgetUtilizationThresholdPercent
    batchAlertEnabled: globalBatchEnabled
    tags: allTags
  }
}

// The operations workbook over the same telemetry as the log search alerts.
module workbook 'modules/workbook.bicep' = {
  name: 'workbook'
  params: {
    location: location
    displayName: 'Inferbus ${environmentName}'
    appInsightsId: monitoring.outputs.appInsightsId
    tags: allTags
  }
}

output environmentName string = environmentName
output functionAppName string = functionApp.outputs.name
output functionAppHostName string = functionApp.outputs.defaultHostName
output appIdentityPrincipalId string = identities.outputs.appIdentityPrincipalId
output appIdentityClientId string = identities.outputs.appIdentityClientId
output hostStorageAccountName string = hostStorage.outputs.name
output dataStorageAccountName string = dataStorage.outputs.name
output serviceBusNamespace string = serviceBus.outputs.fullyQualifiedNamespace
output requestsQueueName string = serviceBus.outputs.requestsQueueName
output priorityQueueName string = serviceBus.outputs.priorityQueueName
output orderedQueueName string = serviceBus.outputs.orderedQueueName
output resultsTopicName string = serviceBus.outputs.resultsTopicName
output eventGridTopicEndpoint string = eventGrid.outputs.topicEndpoint
output eventGridSystemTopicName string = eventGrid.outputs.systemTopicName
output eventGridTopicName string = eventGrid.outputs.topicName
output eventGridNamespaceName string = eventGridNamespace.outputs.name
output eventGridNamespaceEndpoint string = eventGridNamespace.outputs.endpoint
output workbookId string = workbook.outputs.id
output globalBatchEndpoint string = globalBatchEnabled ? openAIBatch.outputs.endpoint : ''
output globalBatchDeploymentName string = globalBatchEnabled ? openAIBatch.outputs.deploymentName : ''
output queueModelEndpoint string = queueModelDeployed ? openAIChat.outputs.endpoint : azureOpenAIEndpoint
output queueModelDeployments string = queueModelDeployed ? servedModels : ''
// azd shows and keeps every output: a deployment that answers with the stand-in says so.
output MODEL_WARNING string = (modelProvider == 'local') ? 'modelProvider is local: this deployment answers every model alias with the deterministic local stand-in, not a model. Leave INFERBUS_MODEL_PROVIDER unset (or set it to azure_openai) to deploy one.' : ''
