// Alert rules: nothing is lost silently. Every dead-letter, every failed Event Grid
// delivery and every failed invocation raises an alert; so does a request waiting too long.

@description('Azure region of the log alert rule.')
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

@description('Age in seconds of the oldest active request above which an alert fires.')
@minValue(60)
param oldestMessageAgeThresholdSeconds int = 900

@description('Prefix of the log line in which the app reports the request queue every minute (shared/backlog_report.py), with oldest_age_seconds=<age of the oldest active message>.')
param backlogReportPrefix string = 'inferbus.backlog'

@description('Failed invocations in five minutes above which an alert fires.')
@minValue(0)
param functionFailureThreshold int = 0

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

module functionFailures 'metric-alert.bicep' = {
  name: 'alert-function-failures'
  params: {
    name: '${namePrefix}-function-failures'
    alertDescription: 'Function invocations failed. The batch processor never raises by design, so a failure here is a bug or a host problem: check exceptions in Application Insights.'
    scopeId: appInsightsId
    metricNamespace: 'microsoft.insights/components'
    metricName: 'requests/failed'
    timeAggregation: 'Count'
    operator: 'GreaterThan'
    threshold: functionFailureThreshold
    severity: 2
    actionGroupId: actionGroupId
    tags: tags
  }
}

// Service Bus has no platform metric for the age of the oldest message, so the app reports
// it every minute in a log line (the report_backlog timer) and a log alert parses it.
resource oldestMessageAge 'Microsoft.Insights/scheduledQueryRules@2023-12-01' = {
  name: '${namePrefix}-oldest-request-age'
  location: location
  tags: tags
  properties: {
    displayName: '${namePrefix}-oldest-request-age'
    description: 'The oldest active request has waited longer than ${oldestMessageAgeThresholdSeconds} s: processing is stalled or scale is capped (maximum instances, model quota).'
    severity: 2
    enabled: true
    scopes: [
      appInsightsId
    ]
    evaluationFrequency: 'PT5M'
    windowSize: 'PT5M'
    autoMitigate: true
    criteria: {
      allOf: [
        {
          query: 'traces | where message startswith "${backlogReportPrefix} " | extend ageSeconds = todouble(extract("oldest_age_seconds=([0-9.]+)", 1, message)) | project timestamp, ageSeconds'
          timeAggregation: 'Maximum'
          metricMeasureColumn: 'ageSeconds'
          operator: 'GreaterThan'
          threshold: oldestMessageAgeThresholdSeconds
          failingPeriods: {
            numberOfEvaluationPeriods: 1
            minFailingPeriodsToAlert: 1
          }
        }
      ]
    }
    actions: {
      actionGroups: empty(actionGroupId) ? [] : [
        actionGroupId
      ]
    }
  }
}
