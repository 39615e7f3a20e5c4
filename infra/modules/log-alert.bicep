// One log search alert rule (scheduled query) on the Application Insights component.
//
// The query returns one row per dimension value (a string column) with a timestamp column
// and a numeric measure column; the rule aggregates the measure per dimension over the
// window and compares it with the threshold. The queries live in queries/*.kql, where they
// can be run as they are in the component's Logs (docs/monitoring.md, Alerts).

@description('Alert rule name (also its display name).')
param name string

@description('What the alert means and what to do about it.')
param alertDescription string

@description('Azure region of the rule.')
param location string

@description('Resource id of the Application Insights component the query runs against.')
param scopeId string

@description('KQL over the component\'s tables (customMetrics, requests, dependencies...).')
param query string

@description('Numeric column of the query compared with the threshold.')
param measureColumn string

@description('Aggregation of the measure over the window.')
@allowed([
  'Average'
  'Maximum'
  'Minimum'
  'Total'
])
param timeAggregation string = 'Maximum'

@description('Comparison with the threshold.')
@allowed([
  'GreaterThan'
  'GreaterThanOrEqual'
  'LessThan'
  'LessThanOrEqual'
])
param operator string = 'GreaterThan'

@description('Threshold the aggregated measure is compared with.')
param threshold int

@description('Dimensions (string columns of the query) to split by, e.g. [{ name: \'queue\', operator: \'Include\', values: [\'*\'] }].')
param dimensions array = []

@description('Severity, 0 (critical) to 4 (verbose).')
@minValue(0)
@maxValue(4)
param severity int = 2

@description('Window the query covers.')
param windowSize string = 'PT5M'

@description('How often the rule is evaluated.')
param evaluationFrequency string = 'PT5M'

@description('Action group notified when the alert fires; empty creates the rule without notifications.')
param actionGroupId string = ''

@description('Tags applied to the rule.')
param tags object = {}

resource rule 'Microsoft.Insights/scheduledQueryRules@2026-03-01' = {
  name: name
  location: location
  tags: tags
  kind: 'LogAlert'
  properties: {
    displayName: name
    description: alertDescription
    severity: severity
    enabled: true
    scopes: [
      scopeId
    ]
    evaluationFrequency: evaluationFrequency
    windowSize: windowSize
    autoMitigate: true
    criteria: {
      allOf: [
        {
          query: query
          timeAggregation: timeAggregation
          metricMeasureColumn: measureColumn
          operator: operator
          threshold: threshold
          dimensions: dimensions
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

output id string = rule.id
