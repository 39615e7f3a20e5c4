// Function App on the Flex Consumption plan (Linux, Python 3.13), running as a
// user-assigned managed identity. Every connection is identity-based: no keys or
// connection strings are stored in app settings.
//
// Python 3.13 on Flex Consumption: https://learn.microsoft.com/azure/azure-functions/flex-consumption-plan#supported-language-stack-versions
// From 3.13 the worker isolates the app's dependencies by default, so the 3.11-era
// PYTHON_ISOLATE_WORKER_DEPENDENCIES setting is not set.

// Shared constants, fixed at compile time (catalog.json, role-definitions.json).
var dataContainers = loadJsonContent('catalog.json', '$.dataContainers')
var queueNames = loadJsonContent('catalog.json', '$.queueNames')
var resultsTopicName = loadJsonContent('catalog.json', '$.resultsTopicName')
var roleDefinitionIds = loadJsonContent('role-definitions.json', '$.roleDefinitionIds')

@description('Azure region of the plan and the app.')
param location string

@description('Name of the Flex Consumption plan.')
param planName string

@description('Name of the Function App (also the default host name prefix).')
param appName string

@description('Resource id of the user-assigned identity the app runs as.')
param appIdentityId string

@description('Client id of that identity (selects it for every identity-based connection).')
param appIdentityClientId string

@description('Principal id of that identity.')
param appIdentityPrincipalId string

@description('Name of the host storage account (AzureWebJobsStorage).')
param hostStorageAccountName string

@description('Blob container URL that receives deployment packages.')
param deploymentContainerUrl string

@description('Blob endpoint of the data storage account (https://<account>.blob.core.windows.net/).')
param dataBlobEndpoint string

@description('Queue endpoint of the data storage account (https://<account>.queue.core.windows.net/); the blob trigger writes poison-blob messages there.')
param dataQueueEndpoint string

@description('Fully qualified Service Bus namespace (<namespace>.servicebus.windows.net).')
param serviceBusFullyQualifiedNamespace string

@description('Name of the Application Insights component.')
param appInsightsName string

@description('Endpoint the app publishes result CloudEvents to: the custom Event Grid topic, or the Event Grid namespace when eventGridNamespaceTopic is set.')
param eventGridTopicEndpoint string

@description('Namespace topic the app publishes result CloudEvents to (EventGridTopic__namespaceTopic) when eventGridTopicEndpoint is the namespace endpoint; empty publishes to the custom topic.')
param eventGridNamespaceTopic string = ''

@description('HTTP endpoint of the Event Grid namespace (https://<namespace hostname>) the pull consumer receives from.')
param eventGridPullNamespaceEndpoint string

@description('Namespace topic of the pull consumer (its queue event subscription below).')
param eventGridPullTopicName string

@description('Queue event subscription the pull consumer receives from.')
param eventGridPullSubscriptionName string

@description('Upper bound of instances (Flex Consumption\'s lowest is 40). The model quota is shared out by the live instances (ModelCapacity__*), so no count of instances asks a deployment for more than its quota (infra/README.md, Model capacity).')
@minValue(40)
@maxValue(1000)
param maximumInstanceCount int = 40

@description('Memory of each instance in MB.')
@allowed([
  512
  2048
  4096
])
param instanceMemoryMB int = 2048

@description('Concurrent HTTP requests per instance (intake and status endpoints).')
@minValue(1)
@maxValue(1000)
param httpPerInstanceConcurrency int = 16

@description('Service Bus maxConcurrentCalls per instance; 0 keeps the value of host.json.')
@minValue(0)
param serviceBusMaxConcurrentCalls int = 0

@description('Always-ready instances, e.g. [{ name: \'http\', instanceCount: 1 }] or [{ name: \'function:<name>\', instanceCount: 1 }]. Empty means scale to zero.')
param alwaysReady array = []

@description('Comma-separated model names the intake accepts (AllowedModels), the one-provider shorthand of the model catalog with modelProvider; ignored (left empty) when modelCatalog is set.')
param allowedModels string = 'local-analyzer'

@description('Model catalog file shipped with the app, relative to its root (ModelCatalog); empty uses allowedModels and modelProvider. The app refuses both at once, so a catalog empties AllowedModels and ModelProvider.')
param modelCatalog string = ''

@description('Tenants a producer sending straight to the request queues may name (ProducerTenants), comma-separated. Empty: none, so every direct producer\'s message is dead-lettered TenantNotAllowed until its tenant is listed (HTTP, blob and Event Grid callers are unaffected: their tenant comes from their identity).')
param producerTenants string = ''

@description('Model for work that names none, e.g. documents dropped in the incoming container (DefaultModel); one of allowedModels. Empty means the first of allowedModels.')
param defaultModel string = ''

@description('Audience of the Entra tokens App Service authentication requires on the API (modules/app-authentication.bicep): the API\'s client id, or the first of its accepted audiences (ApiTokenAudience). The OpenAPI document then requires such a bearer token beside the function key; empty leaves it out.')
param apiTokenAudience string = ''

@description('Audience (application ID URI) of Entra tokens that Event Grid presents on the events webhook; empty skips token validation.')
param webhookTokenAudience string = ''

@description('Issuer of those tokens, e.g. https://sts.windows.net/<tenant id>/; required with webhookTokenAudience.')
param webhookTokenIssuer string = ''

@description('Concurrent model calls per instance (ModelConcurrency); 0 (the default) derives it from modelCapacity, modelTokensPerCall and modelCallSeconds: what one instance needs to use the whole quota when it is the only one with work, twice over, between 2 and 64; 16 when modelCapacity is 0 (infra/README.md, Model capacity). A positive value overrides it. The capacity gate, not this, bounds the load.')
@minValue(0)
@maxValue(256)
param modelConcurrency int = 0

@description('Tokens of a typical model call, prompt and answer together; modelCapacity x 1,000 / this is the calls a minute the quota serves (derives ModelConcurrency when modelConcurrency is 0).')
@minValue(1)
param modelTokensPerCall int = 1000

@description('Seconds of a typical model call, from request to answer; the calls a minute at the quota x this / 60 is the calls in flight (derives ModelConcurrency when modelConcurrency is 0).')
@minValue(1)
param modelCallSeconds int = 5

@description('The queue lane\'s model deployment capacity, as Azure counts it for Standard and GlobalStandard deployments: thousands of tokens per minute. It sets ModelCapacity__tokensPerMinute (x 1000) and ModelCapacity__requestsPerMinute (x 6, Azure\'s requests per 1,000 tokens for chat models) for the aliases of allowedModels; 0 leaves them unset (no budget, 429s still pause the deployment).')
@minValue(0)
param modelCapacity int = 0

@description('Days a job document is kept (the jobs lifecycle rule of the data account, the same parameter of main.bicep): JobRetentionDays, after which the app answers 410 Gone for a request id whose job is gone.')
@minValue(2)
param jobsRetentionDays int = 90

@description('ModelProvider, the one-provider shorthand of the model catalog with allowedModels: azure_openai (the queue lane\'s deployed model), or local for the deterministic local stand-in.')
@allowed([
  'local'
  'azure_openai'
])
param modelProvider string

@description('Azure OpenAI endpoint (https://<resource>.openai.azure.com/) when modelProvider is azure_openai; the app identity needs Cognitive Services OpenAI User there.')
param azureOpenAIEndpoint string = ''

@description('Global Batch lane: comma-separated alias=deployment pairs (GlobalBatch__deployments), each alias one of allowedModels; empty turns the lane off.')
param globalBatchDeployments string = ''

@description('Azure OpenAI endpoint of those deployments (GlobalBatch__endpoint); the app identity needs Cognitive Services OpenAI User there (modules/openai-batch.bicep).')
param globalBatchEndpoint string = ''

@description('Capacity of the Global Batch deployment in thousands of enqueued tokens; its enqueued-token quota (x 1000) sets GlobalBatch__enqueuedTokens, so no planned file exceeds it. 0 (the lane off) leaves the setting empty.')
@minValue(0)
param globalBatchCapacity int = 0

@description('Extra or overriding app settings, applied last.')
param appSettingOverrides object = {}

@description('Resource id of the subnet (delegated to Microsoft.App/environments) of the app\'s outbound VNet integration (main.bicep\'s privateNetworking); empty: none. Inbound stays public.')
param virtualNetworkSubnetId string = ''

@description('Tags applied to every resource.')
param tags object = {}

@description('Tags of the Function App alone, such as azd-service-name (azd deploy looks the app up by it, so no other resource may carry it).')
param siteTags object = {}

resource appInsights 'Microsoft.Insights/components@2020-02-02' existing = {
  name: appInsightsName
}

resource plan 'Microsoft.Web/serverfarms@2025-03-01' = {
  name: planName
  location: location
  tags: tags
  kind: 'functionapp'
  sku: {
    name: 'FC1'
    tier: 'FlexConsumption'
  }
  properties: {
    reserved: true
  }
}

resource site 'Microsoft.Web/sites@2025-03-01' = {
  name: appName
  location: location
  tags: union(tags, siteTags)
  kind: 'functionapp,linux'
  identity: {
    type: 'UserAssigned'
    userAssignedIdentities: {
      '${appIdentityId}': {}
    }
  }
  properties: {
    serverFarmId: plan.id
    httpsOnly: true
    // Flex Consumption VNet integration: outbound calls go through the subnet, which
    // reaches the services' private endpoints (modules/network.bicep).
    virtualNetworkSubnetId: empty(virtualNetworkSubnetId) ? null : virtualNetworkSubnetId
    // No siteConfig.ftpsState: Flex Consumption rejects it (FTP is off through the
    // basicPublishingCredentialsPolicies below); tests/infra/test_flex_site.py holds the
    // Flex deprecation table every property of this site is checked against.
    siteConfig: {
      minTlsVersion: '1.2'
      http20Enabled: true
    }
    functionAppConfig: {
      deployment: {
        storage: {
          type: 'blobContainer'
          value: deploymentContainerUrl
          authentication: {
            type: 'UserAssignedIdentity'
            userAssignedIdentityResourceId: appIdentityId
          }
        }
      }
      scaleAndConcurrency: {
        maximumInstanceCount: maximumInstanceCount
        instanceMemoryMB: instanceMemoryMB
        alwaysReady: alwaysReady
        triggers: {
          http: {
            perInstanceConcurrency: httpPerInstanceConcurrency
          }
        }
      }
      runtime: {
        name: 'python'
        version: '3.13'
      }
    }
  }
}

// Publishing with basic credentials (FTP, SCM user/password) is off: deployments go
// through Microsoft Entra ID (func azure functionapp publish, az functionapp deploy).
resource ftpPublishing 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2025-03-01' = {
  parent: site
  name: 'ftp'
  properties: {
    allow: false
  }
}

resource scmPublishing 'Microsoft.Web/sites/basicPublishingCredentialsPolicies@2025-03-01' = {
  parent: site
  name: 'scm'
  properties: {
    allow: false
  }
}

// ModelConcurrency from the quota (infra/README.md, Model capacity): what one instance needs
// to use the whole deployment when it is the only one with work, twice over, between 2 and
// 64; 16 without a known capacity. Calls a minute at the quota: capacity x 1,000 tokens /
// modelTokensPerCall, or the requests a minute (capacity x 6) when fewer; in flight: that x
// modelCallSeconds / 60. Integer math, one division: ceil(a / b) = (a + b - 1) / b.
// (pycep groups an operator chain from the right: every step is parenthesized.)
var quotaCallsPerMinuteTimesTokensPerCall = modelCapacity * min(1000, 6 * modelTokensPerCall)
var twiceInFlightDividend = 2 * (quotaCallsPerMinuteTimesTokensPerCall * modelCallSeconds)
var twiceInFlightDivisor = 60 * modelTokensPerCall
var callsInFlightTwiceOver = ((twiceInFlightDividend + twiceInFlightDivisor) - 1) / twiceInFlightDivisor
var derivedModelConcurrency = (modelCapacity > 0) ? min(64, max(2, callsInFlightTwiceOver)) : 16
var effectiveModelConcurrency = (modelConcurrency > 0) ? modelConcurrency : derivedModelConcurrency
// The high-priority lane's own threads: a quarter (16 -> 4 as before), at least 2. Its calls
// go first at the gate and weigh 4x in the demand, so it needs threads for its own traffic
// only, not for a backlog's line.
var effectivePriorityModelConcurrency = max(2, effectiveModelConcurrency / 4)

// Every setting shared/settings.py reads in Azure, plus what the host and bindings need.
// Flex Consumption takes the runtime from functionAppConfig: FUNCTIONS_WORKER_RUNTIME,
// FUNCTIONS_EXTENSION_VERSION and WEBSITE_RUN_FROM_PACKAGE are not set here.
var appSettings = {
  // Functions host storage, through the app identity.
  AzureWebJobsStorage__accountName: hostStorageAccountName
  AzureWebJobsStorage__credential: 'managedidentity'
  AzureWebJobsStorage__clientId: appIdentityClientId
  // Telemetry (infra/README.md, Observability): the host and, with the switch below, the
  // Python worker export OpenTelemetry to the connection string; the authentication string
  // makes them ingest with the app identity (Monitoring Metrics Publisher, below), which
  // Application Insights requires when its local authentication is disabled.
  APPLICATIONINSIGHTS_CONNECTION_STRING: appInsights.properties.ConnectionString
  APPLICATIONINSIGHTS_AUTHENTICATION_STRING: 'ClientId=${appIdentityClientId};Authorization=AAD'
  PYTHON_APPLICATIONINSIGHTS_ENABLE_TELEMETRY: 'true'
  // Export the app's own log records only (its loggers are under shared): the runtime's
  // per-invocation lines would double the log volume, and the host reports invocations.
  PYTHON_APPLICATIONINSIGHTS_LOGGER_NAME: 'shared'
  // The app's own spans time each hop: the Azure SDKs' per-call spans (two per storage
  // call) were most of telemetry's cost, and the HTTP client spans under them would repeat
  // each call with the blob's name in the span name (docs/monitoring.md, What it costs).
  OTEL_PYTHON_DISABLED_INSTRUMENTATIONS: 'azure_sdk,requests,urllib,urllib3'
  // Connection "Storage" (blob bindings and the app's blob client). With blobServiceUri the
  // blob trigger also needs queueServiceUri: it writes poison blobs to a queue of the same
  // account (host-only: the app's own blob client reads blobServiceUri alone).
  Storage__blobServiceUri: dataBlobEndpoint
  Storage__queueServiceUri: dataQueueEndpoint
  Storage__credential: 'managedidentity'
  Storage__clientId: appIdentityClientId
  // Connection "ServiceBusConnection" (trigger, output and the app's sender).
  ServiceBusConnection__fullyQualifiedNamespace: serviceBusFullyQualifiedNamespace
  ServiceBusConnection__credential: 'managedidentity'
  ServiceBusConnection__clientId: appIdentityClientId
  // Custom Event Grid topic (results as CloudEvents), through the app identity.
  EventGridTopic__topicEndpoint: eventGridTopicEndpoint
  EventGridTopic__credential: 'managedidentity'
  EventGridTopic__clientId: appIdentityClientId
  // Empty: the topic above is a custom topic. Set: it is the namespace, and this its topic.
  EventGridTopic__namespaceTopic: eventGridNamespaceTopic
  // Event Grid namespace pull door (timer-triggered consumer of a queue event subscription),
  // through the app identity (EventGrid Data Receiver on the topic). No key: the namespace
  // keys are never read (EventGridPull__key is local only).
  EventGridPull__namespaceEndpoint: eventGridPullNamespaceEndpoint
  EventGridPull__topicName: eventGridPullTopicName
  EventGridPull__subscriptionName: eventGridPullSubscriptionName
  EventGridPull__clientId: appIdentityClientId
  // Entities and containers.
  // The request lanes (shared/lanes.py): standard, high priority, ordered per document.
  RequestsQueueName: queueNames.requests
  PriorityQueueName: queueNames.priority
  OrderedQueueName: queueNames.ordered
  ResultsTopicName: resultsTopicName
  LedgerContainer: dataContainers.ledgers
  UsageContainer: dataContainers.usage
  EventGridDeadLetterContainer: dataContainers.eventGridDeadLetters
  IncomingContainer: dataContainers.incoming
  InputsContainer: dataContainers.inputs
  JobsContainer: dataContainers.jobs
  IdempotencyContainer: dataContainers.idempotency
  AllowedInputContainers: '${dataContainers.incoming},${dataContainers.inputs}'
  // Intake policy. ProducerTenants: tenants a direct queue producer may name (empty: none).
  ProducerTenants: producerTenants
  // AllowedModels/ModelProvider (the shorthand) or ModelCatalog: the app refuses both.
  ModelCatalog: modelCatalog
  AllowedModels: empty(modelCatalog) ? allowedModels : ''
  DefaultModel: defaultModel
  MaxInlineTextBytes: '262144'
  MaxUploadBytes: '10485760'
  AllowedUploadMediaTypes: 'text/plain,text/markdown,text/csv,text/html,application/json,application/pdf,image/*'
  DefaultDeadlineSeconds: '3600'
  // The retention parameters of main.bicep assume this longest deadline (1 day).
  MaxDeadlineSeconds: '86400'
  StatusPollSeconds: '2'
  // Retention: the jobs lifecycle rule deletes a job this many days after its last update;
  // the app answers 410 Gone for an older request id whose job is gone.
  JobRetentionDays: string(jobsRetentionDays)
  // Backpressure per lane: each lane's own queue depth against its own limit (0: none).
  MaxQueueBacklog: '5000'
  MaxPriorityQueueBacklog: '1000'
  MaxOrderedQueueBacklog: '5000'
  BacklogCacheSeconds: '5'
  // After a send fails for a broker outage, intake answers 503 at once this long, then probes.
  ServiceBusBreaker__openSeconds: '0.5'
  // Processing: retries with backoff, lock renewal, the deferred-message sweeper.
  ModelConcurrency: string(effectiveModelConcurrency)
  PriorityModelConcurrency: string(effectivePriorityModelConcurrency)
  // The retry budget is at least 917 s of backoff (a ten-minute outage dead-letters
  // nothing); MaxRetries stays below the request queues' maxDeliveryCount (10).
  MaxRetries: '9'
  RetryBaseSeconds: '5'
  RetryMaxSeconds: '600'
  RetryJitterFloor: '0.5'
  LockRenewalSeconds: '20'
  MaxLockRenewalSeconds: '600'
  DeferredSweepSchedule: '0 */1 * * * *'
  DeferredMissingRetries: '5'
  DeferredMissingRetrySeconds: '60'
  BacklogReportSchedule: '30 */1 * * * *'
  // Every accepted request ends: the dead-letter reconciler and the job watchdog.
  DeadLetterReconcileSchedule: '15 */1 * * * *'
  JobWatchdogSchedule: '45 */5 * * * *'
  JobWatchdogGraceSeconds: '900'
  JobWatchdogStaleSeconds: '90000'
  JobWatchdogMaxRunSeconds: '240'
  // A job left accepted with no live message is sent again from its record, boundedly.
  JobResend__afterSeconds: '1200'
  JobResend__maxAttempts: '2'
  // The reconciler reads the dead-letter queues this many messages a page.
  DeadLetterReconcilePageSize: '100'
  // Pull door: each timer run receives batches of up to maxEvents (each receive waits up to
  // maxWaitSeconds for events) until drainSeconds have passed.
  EventGridPullSchedule: '*/10 * * * * *'
  EventGridPull__maxEvents: '32'
  EventGridPull__maxWaitSeconds: '10'
  EventGridPull__drainSeconds: '50'
  // Models: AllowedModels and ModelProvider are the one-provider shorthand of the model
  // catalog (models.json is served when neither is set). The local stand-in knobs stay
  // neutral in Azure.
  ModelProvider: empty(modelCatalog) ? modelProvider : ''
  // An answer that breaks its task's output schema is tried again this many times.
  InvalidOutputRetries: '2'
  // Model capacity (infra/README.md): each deployment's quota flows to the instances by
  // their demand, a 429 pausing the deployment without spending a request's retries; a
  // call expected to wait longer than waitSeconds gives its message back at once.
  ModelCapacity__enabled: 'true'
  ModelCapacity__waitSeconds: '60'
  ModelCapacity__heartbeatSeconds: '5'
  // Tenants share each deployment: the seconds of a tenant's work the queue and each
  // instance hold before the rest waits in the broker's schedule (docs/tenants.md).
  ModelCapacity__fairShareSeconds: '5'
  Usage__flushSeconds: '5'
  ModelCapacity__tokensPerMinute: (modelCapacity > 0) ? string(modelCapacity * 1000) : ''
  ModelCapacity__requestsPerMinute: (modelCapacity > 0) ? string(modelCapacity * 6) : ''
  LocalModelLatencyMs: '0'
  LocalModelTransientRate: '0'
  LocalModelRefusalTerms: ''
  // Per-request fault injection is a development-stack switch: never on in Azure.
  LocalModelFaults: 'false'
  AzureOpenAI__endpoint: azureOpenAIEndpoint
  // The v1 API: current models (gpt-5, o-series) are not served on the GA dated version.
  AzureOpenAI__apiVersion: 'v1'
  AzureOpenAI__credential: 'managedidentity'
  AzureOpenAI__clientId: appIdentityClientId
  AzureOpenAI__timeoutSeconds: '120'
  // Global Batch lane (infra/README.md, Global Batch): the app alone uploads files, creates
  // and polls batches, with its identity (no GlobalBatch__apiKey in Azure).
  GlobalBatch__deployments: globalBatchDeployments
  GlobalBatch__endpoint: globalBatchEndpoint
  GlobalBatch__apiVersion: 'v1'
  GlobalBatch__clientId: appIdentityClientId
  GlobalBatch__routePriorities: ''
  GlobalBatch__maxLinesPerFile: '100000'
  GlobalBatch__maxBytesPerFile: '200000000'
  GlobalBatch__submitAtLines: '50000'
  GlobalBatch__submitAfterSeconds: '900'
  GlobalBatch__outputExpiryDays: '14'
  GlobalBatch__failedLines: 'queue'
  GlobalBatch__maxResubmissions: '2'
  GlobalBatch__quotaRetrySeconds: '300'
  GlobalBatch__quotaRetryMaxSeconds: '3600'
  // A batch refused for quota is retried until its requests' deadline, at most this long.
  GlobalBatch__quotaWaitLimitSeconds: '86400'
  // The deployment's enqueued-token quota: planned files are split to stay below it.
  GlobalBatch__enqueuedTokens: (globalBatchCapacity > 0) ? string(globalBatchCapacity * 1000) : ''
  GlobalBatch__pollSeconds: '60'
  GlobalBatch__runSeconds: '240'
  GlobalBatch__timeoutSeconds: '300'
  GlobalBatchSchedule: '5 */1 * * * *'
  BatchContainer: dataContainers.batches
  // Identity of callers: the tenant comes from Entra claims, never from a header, in Azure.
  AllowTenantHeader: 'false'
  TenantClaimTypes: 'tid,http://schemas.microsoft.com/identity/claims/tenantid'
  // The audience of the Entra tokens App Service authentication requires: the OpenAPI
  // document declares the bearer token (entraBearer) beside the function key.
  ApiTokenAudience: apiTokenAudience
  // Event Grid webhook: Entra token validation when the subscription delivers with one.
  WebhookTokenAudience: webhookTokenAudience
  WebhookTokenIssuer: webhookTokenIssuer
}

var concurrencySettings = (serviceBusMaxConcurrentCalls > 0) ? {
  AzureFunctionsJobHost__extensions__serviceBus__maxConcurrentCalls: string(serviceBusMaxConcurrentCalls)
} : {}

resource settings 'Microsoft.Web/sites/config@2025-03-01' = {
  parent: site
  name: 'appsettings'
  properties: union(appSettings, concurrencySettings, appSettingOverrides)
}

// Entra-authenticated telemetry ingestion (APPLICATIONINSIGHTS_AUTHENTICATION_STRING).
resource telemetryPublisher 'Microsoft.Authorization/roleAssignments@2022-04-01' = {
  name: guid(appInsights.id, appIdentityPrincipalId, roleDefinitionIds.monitoringMetricsPublisher)
  scope: appInsights
  properties: {
    roleDefinitionId: subscriptionResourceId('Microsoft.Authorization/roleDefinitions', roleDefinitionIds.monitoringMetricsPublisher)
    principalId: appIdentityPrincipalId
    principalType: 'ServicePrincipal'
  }
}

output id string = site.id
output name string = site.name
output defaultHostName string = site.properties.defaultHostName
