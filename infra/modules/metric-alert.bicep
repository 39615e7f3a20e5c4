// One static-threshold metric alert on one resource.

@description('Alert rule name.')
param name string

@description('What the alert means and what to do about it.')
param alertDescription string

@description('Resource id the metric is read from.')
param scopeId string

@description('Metric namespace, e.g. Microsoft.ServiceBus/namespaces.')
param metricNamespace string

@description('Metric name as in the Azure Monitor REST API.')
param metricName string

@description('Aggregation over the window.')
@allowed([
  'Average'
  'Count'
  'Maximum'
  'Minimum'
  'Total'
])
param timeAggregation string

@description('Comparison with the threshold.')
@allowed([
  'GreaterThan'
  'GreaterThanOrEqual'
  'LessThan'
  'LessThanOrEqual'
])
param operator string = 'GreaterThan'

@description('Threshold the aggregated value is compared with.')
param threshold int = 0

@description('Metric dimensions to split or filter by.')
param dimensions array = []

@description('Severity, 0 (critical) to 4 (verbose).')
@minValue(0)
@maxValue(4)
param severity int = 2

@description('Evaluation window.')
param windowSize string = 'PT5M'

@description('How often the rule is evaluated.')
param evaluationFrequency string = 'PT1M'

@description('Action group notified when the alert fires; empty creates the rule without notifications.')
param actionGroupId string = ''

@description('Tags applied to the rule.')
param tags object = {}

resource alert 'Microsoft.Insights/metricAlerts@2026-01-01' = {
  name: name
  location: 'global'
  tags: tags
  properties: {
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
      'odata.type': 'Microsoft.Azure.Monitor.SingleResourceMultipleMetricCriteria'
      allOf: [
        {
          criterionType: 'StaticThresholdCriterion'
          name: metricName
          metricNamespace: metricNamespace
          metricName: metricName
          timeAggregation: timeAggregation
          operator: operator
          threshold: threshold
          dimensions: dimensions
        }
      ]
    }
    actions: empty(actionGroupId) ? [] : [
      {
        actionGroupId: actionGroupId
      }
    ]
  }
}

output id string = alert.id
