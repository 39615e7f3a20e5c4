// Alert rules: nothing is lost silently. Platform metrics watch Service Bus dead letters and
// Event Grid deliveries; log search alerts over the app's OpenTelemetry telemetry in
// Application Insights (customMetrics and spans, queries in queries/*.kql) watch the oldest
// waiting request, entities whose counts cannot be read, dead-letter growth, refusal and
// failure rates, failed invocations, Global Batch batches that ended expired, failed or for
// the enqueued-token quota, and tenants near one of their budgets.

@description('Azure region of the log search alert rules.')
param location string

@description('Prefix of alert rule names.')
param namePrefix string

@description('Action group notified by every alert; empty creates the rules without notifications.')
param actionGroupId string = ''

@description('Resource id of the Service Bus namespace.')
param serviceBusNamespaceId string

@description('Resource id of the storage Event Grid system topic.')
param systemTopicId string

@description('Resource id of the custom Event Grid topic.')
param topicId string

@description('Resource id of the Application Insights component.')
param appInsightsId string

@description('Age in seconds of the oldest active message of a request queue above which an alert fires (gauge inferbus.queue.oldest_message_age).')
@minValue(60)
param oldestMessageAgeThresholdSeconds int = 900

@description('Messages added to the dead-letter sub-queue of one request queue within 15 minutes above which an alert fires (gauge inferbus.queue.dead_lettered_messages).')
@minValue(0)
param deadLetterGrowthThreshold int = 0

@description('Percentage of submissions refused by one door within 15 minutes above which an alert fires (inferbus.requests.refused / accepted + refused; at least 20 submissions).')
@minValue(1)
@maxValue(100)
param refusalRateThresholdPercent int = 25

@description('Percentage of request messages of one lane settled dead-lettered within 15 minutes above which an alert fires (inferbus.messages.settled; at least 20 settlements).')
@minValue(1)
@maxValue(100)
param failureRateThresholdPercent int = 5

@description('Failed function invocations in five minutes above which an alert fires.')
@minValue(0)
param functionFailureThreshold int = 0

@description('Alert on Global Batch batches that ended expired, failed or batch_quota_exceeded (when the batch lane is deployed).')
param batchAlertEnabled bool = false

@description('Global Batch batches ending expired, failed or batch_quota_exceeded within 15 minutes above which an alert fires.')
@minValue(0)
param batchEndedThreshold int = 0

@description('Failed reads of one entity\'s counts (a request queue or a results-topic subscription) within 10 minutes above which an alert fires (counter inferbus.queue.unreadable).')
@minValue(0)
param queueUnreadableThreshold int = 0

@description('Percentage of one of a tenant\'s budgets (tokens_per_day, tokens_per_month, cost_per_month) used in its period at or above which an alert fires (histogram inferbus.budget.utilization, the fraction used / limit, in percent).')
@minValue(1)
@maxValue(100)
param budgetUtilizationThresholdPercent int = 80

@description('Tags applied to every rule.')
param tags object = {}

module deadLetteredMessages 'metric-alert.bicep' = {
  name: 'alert-servicebus-deadletters'
  params: {
    name: '${namePrefix}-servicebus-deadletters'
    alertDescription: 'A Service Bus entity has dead-lettered messages. Inspect the dead-letter queue (reason and description) and resubmit or discard.'
    scopeId: serviceBusNamespaceId
    metricNamespace: 'Microsoft.ServiceBus/namespaces'
    metricName: 'DeadletteredMessages'
    timeAggregation: 'Maximum'
    operator: 'GreaterThan'
    threshold: 0
    dimensions: [
      {
        name: 'EntityName'
        operator: 'Include'
        values: [
          '*'
        ]
      }
    ]
    severity: 1
    actionGroupId: actionGroupId
    tags: tags
  }
}

module systemTopicDeadLettered 'metric-alert.bicep' = {
  name: 'alert-blob-events-deadlettered'
  params: {
    name: '${namePrefix}-blob-events-deadlettered'
    alertDescription: 'BlobCreated events could not be delivered to the blobs extension webhook and were dead-lettered to the eventgrid-deadletters container.'
    scopeId: systemTopicId
    metricNamespace: 'Microsoft.EventGrid/systemTopics'
    metricName: 'DeadLetteredCount'
    timeAggregation: 'Total'
    operator: 'GreaterThan'
    threshold: 0
    severity: 1
    actionGroupId: actionGroupId
    tags: tags
  }
}

module systemTopicDeliveryFailed 'metric-alert.bicep' = {
  name: 'alert-blob-events-delivery-failed'
  params: {
    name: '${namePrefix}-blob-events-delivery-failed'
    alertDescription: 'Event Grid failed to deliver BlobCreated events to the app (it keeps retrying until the retry policy ends).'
    scopeId: systemTopicId
    metricNamespace: 'Microsoft.EventGrid/systemTopics'
    metricName: 'DeliveryAttemptFailCount'
    timeAggregation: 'Total'
    operator: 'GreaterThan'
    threshold: 0
    severity: 2
    actionGroupId: actionGroupId
    tags: tags
  }
}

module topicDeadLettered 'metric-alert.bicep' = {
  name: 'alert-result-events-deadlettered'
  params: {
    name: '${namePrefix}-result-events-deadlettered'
    alertDescription: 'Result CloudEvents could not be delivered to a subscriber and were dead-lettered to the eventgrid-deadletters container.'
    scopeId: topicId
    metricNamespace: 'Microsoft.EventGrid/topics'
    metricName: 'DeadLetteredCount'
    timeAggregation: 'Total'
    operator: 'GreaterThan'
    threshold: 0
    severity: 1
    actionGroupId: actionGroupId
    tags: tags
  }
}

module topicDeliveryFailed 'metric-alert.bicep' = {
  name: 'alert-result-events-delivery-failed'
  params: {
    name: '${namePrefix}-result-events-delivery-failed'
    alertDescription: 'Event Grid failed to deliver result CloudEvents to a subscriber (it keeps retrying until the retry policy ends).'
    scopeId: topicId
    metricNamespace: 'Microsoft.EventGrid/topics'
    metricName: 'DeliveryAttemptFailCount'
    timeAggregation: 'Total'
    operator: 'GreaterThan'
    threshold: 0
    severity: 2
    actionGroupId: actionGroupId
    tags: tags
  }
}

// --- log search alerts over the app's telemetry ---------------------------------------------
// Scheduled queries over customMetrics rather than metric alerts on the component's custom
// metrics: Logs keep every dimension (queue, door, lane) whatever the component's custom
// metric dimensions option, and a rate (refused / submitted, dead-lettered / settled) is a
// query, not a single metric.

// Service Bus has no platform metric for the age of the oldest message: the app reports it
// as a gauge per request queue. Named as the rule it replaces, so a deployment updates it.
module oldestMessageAge 'log-alert.bicep' = {
  name: 'alert-oldest-request-age'
  params: {
    name: '${namePrefix}-oldest-request-age'
    alertDescription: 'The oldest active message of a request queue has waited longer than ${oldestMessageAgeThresholdSeconds} s: processing is stalled or scale is capped (maximum instances, model quota). See the Inferbus workbook, Backlog.'
    location: location
    scopeId: appInsightsId
    query: loadTextContent('queries/alert-oldest-message-age.kql')
    measureColumn: 'ageSeconds'
    timeAggregation: 'Maximum'
    operator: 'GreaterThan'
    threshold: oldestMessageAgeThresholdSeconds
    dimensions: [
      {
        name: 'queue'
        operator: 'Include'
        values: [
          '*'
        ]
      }
    ]
    severity: 2
    windowSize: 'PT5M'
    evaluationFrequency: 'PT5M'
    actionGroupId: actionGroupId
    tags: tags
  }
}

// Counts the app cannot read blind the alerts above for that entity: the app counts each
// failed read (inferbus.queue.unreadable), most often a missing Data Owner assignment.
module queueUnreadable 'log-alert.bicep' = {
  name: 'alert-queue-unreadable'
  params: {
    name: '${namePrefix}-queue-unreadable'
    alertDescription: 'The app could not read the message counts of a request queue or results-topic subscription in the last 10 minutes, so its backlog gauges and the oldest-message and dead-letter alerts are blind for it. The app logs the reason once per failure streak ("counts of <entity> unreadable"); the usual cause is a missing Azure Service Bus Data Owner assignment on the entity (serviceBusGrantBacklogRead, infra/README.md).'
    location: location
    scopeId: appInsightsId
    query: loadTextContent('queries/alert-queue-unreadable.kql')
    measureColumn: 'failedReads'
    timeAggregation: 'Total'
    operator: 'GreaterThan'
    threshold: queueUnreadableThreshold
    dimensions: [
      {
        name: 'queue'
        operator: 'Include'
        values: [
          '*'
        ]
      }
    ]
    severity: 2
    windowSize: 'PT10M'
    evaluationFrequency: 'PT5M'
    actionGroupId: actionGroupId
    tags: tags
  }
}

module deadLetterGrowth 'log-alert.bicep' = {
  name: 'alert-request-deadletter-growth'
  params: {
    name: '${namePrefix}-request-deadletter-growth'
    alertDescription: 'The dead-letter sub-queue of a request queue grew by more than ${deadLetterGrowthThreshold} in 15 minutes. Inspect it (python -m shared.ops sb-deadletters list; the workbook\'s dead letters by reason) and resubmit or discard.'
    location: location
    scopeId: appInsightsId
    query: loadTextContent('queries/alert-deadletter-growth.kql')
    measureColumn: 'growth'
    timeAggregation: 'Maximum'
    operator: 'GreaterThan'
    threshold: deadLetterGrowthThreshold
    dimensions: [
      {
        name: 'queue'
        operator: 'Include'
        values: [
          '*'
        ]
      }
    ]
    severity: 1
    windowSize: 'PT15M'
    evaluationFrequency: 'PT5M'
    actionGroupId: actionGroupId
    tags: tags
  }
}

module refusalRate 'log-alert.bicep' = {
  name: 'alert-refusal-rate'
  params: {
    name: '${namePrefix}-refusal-rate'
    alertDescription: 'More than ${refusalRateThresholdPercent}% of the submissions to one door were refused in 15 minutes. The workbook\'s intake chart shows the reasons: service_unavailable means the queues are full (MaxQueueBacklog), invalid_input, unknown_model or payload_too_large a misbehaving client.'
    location: location
    scopeId: appInsightsId
    query: loadTextContent('queries/alert-refusal-rate.kql')
    measureColumn: 'refusalRatePercent'
    timeAggregation: 'Maximum'
    operator: 'GreaterThan'
    threshold: refusalRateThresholdPercent
    dimensions: [
      {
        name: 'door'
        operator: 'Include'
        values: [
          '*'
        ]
      }
    ]
    severity: 2
    windowSize: 'PT15M'
    evaluationFrequency: 'PT5M'
    actionGroupId: actionGroupId
    tags: tags
  }
}

module failureRate 'log-alert.bicep' = {
  name: 'alert-failure-rate'
  params: {
    name: '${namePrefix}-failure-rate'
    alertDescription: 'More than ${failureRateThresholdPercent}% of the request messages of one lane were dead-lettered in 15 minutes. The workbook\'s dead letters by reason tell a bad producer (InvalidPayload) from a failing model (MaxRetriesExceeded, PermanentFailure).'
    location: location
    scopeId: appInsightsId
    query: loadTextContent('queries/alert-failure-rate.kql')
    measureColumn: 'failureRatePercent'
    timeAggregation: 'Maximum'
    operator: 'GreaterThan'
    threshold: failureRateThresholdPercent
    dimensions: [
      {
        name: 'lane'
        operator: 'Include'
        values: [
          '*'
        ]
      }
    ]
    severity: 1
    windowSize: 'PT15M'
    evaluationFrequency: 'PT5M'
    actionGroupId: actionGroupId
    tags: tags
  }
}

// The component's requests/failed metric now counts the app's "process <queue>" spans, which
// fail on purpose for dead-lettered and abandoned messages (and every retry of the ordered
// lane): the query leaves them, and client errors, out.
module functionFailures 'log-alert.bicep' = {
  name: 'alert-function-failures'
  params: {
    name: '${namePrefix}-function-failures'
    alertDescription: 'Function invocations failed (server errors or exceptions). The batch processor never raises by design, so a failure here is a bug or a host problem: check exceptions in Application Insights.'
    location: location
    scopeId: appInsightsId
    query: loadTextContent('queries/alert-function-failures.kql')
    measureColumn: 'failures'
    timeAggregation: 'Total'
    operator: 'GreaterThan'
    threshold: functionFailureThreshold
    dimensions: [
      {
        name: 'operation'
        operator: 'Include'
        values: [
          '*'
        ]
      }
    ]
    severity: 2
    windowSize: 'PT5M'
    evaluationFrequency: 'PT5M'
    actionGroupId: actionGroupId
    tags: tags
  }
}

// A Global Batch batch that misses its 24 h window ends expired, with no exception anywhere;
// the app counts each ended batch (inferbus.batch.ended, by inferbus.batch.status), and a
// batch whose requests fail because the enqueued-token quota never freed up in time as
// batch_quota_exceeded.
module batchEnded 'log-alert.bicep' = if (batchAlertEnabled) {
  name: 'alert-batch-ended'
  params: {
    name: '${namePrefix}-batch-ended'
    alertDescription: 'A Global Batch batch ended expired (its 24 h window ran out), failed (the service refused it) or batch_quota_exceeded (the deployment\'s enqueued-token quota stayed full until the requests\' deadline or GlobalBatch__quotaWaitLimitSeconds, and their jobs failed). The app resubmits the unfinished requests of an expired batch up to GlobalBatch__maxResubmissions times, then fails their jobs; look for "Global Batch <id> ended" in the app\'s traces and at the deployment\'s enqueued-token quota (globalBatchCapacity).'
    location: location
    scopeId: appInsightsId
    query: loadTextContent('queries/alert-batch-ended.kql')
    measureColumn: 'batches'
    timeAggregation: 'Total'
    operator: 'GreaterThan'
    threshold: batchEndedThreshold
    dimensions: [
      {
        name: 'status'
        operator: 'Include'
        values: [
          '*'
        ]
      }
    ]
    severity: 1
    windowSize: 'PT15M'
    evaluationFrequency: 'PT5M'
    actionGroupId: actionGroupId
    tags: tags
  }
}

// A tenant near its budget is not a fault but a conversation to have before the budget is
// spent. Split by tenant and budget, at or above the threshold ("reaches 80%"). The
// window is an hour: readings come only while the tenant's spend is checked, and a shorter
// window would resolve the alert in every pause of its traffic and fire it again after.
module budgetUtilization 'log-alert.bicep' = {
  name: 'alert-budget-utilization'
  params: {
    name: '${namePrefix}-budget-utilization'
    alertDescription: 'A tenant has used ${budgetUtilizationThresholdPercent}% or more of one of its budgets (tokens_per_day, tokens_per_month or cost_per_month of the tenant catalog, UTC periods). Before it is spent, raise the budget in tenants.json or tell the tenant (docs/tenants.md). The workbook\'s "Tenants: tokens, cost and budgets" shows its tokens, cost and each budget\'s latest use.'
    location: location
    scopeId: appInsightsId
    query: loadTextContent('queries/alert-budget-utilization.kql')
    measureColumn: 'utilizationPercent'
    timeAggregation: 'Maximum'
    operator: 'GreaterThanOrEqual'
    threshold: budgetUtilizationThresholdPercent
    dimensions: [
      {
        name: 'tenant'
        operator: 'Include'
        values: [
          '*'
        ]
      }
      {
        name: 'budget'
        operator: 'Include'
        values: [
          '*'
        ]
      }
    ]
    severity: 2
    windowSize: 'PT1H'
    evaluationFrequency: 'PT5M'
    actionGroupId: actionGroupId
    tags: tags
  }
}
