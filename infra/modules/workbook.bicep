// The Inferbus workbook: the app's OpenTelemetry metrics and spans in Application Insights,
// one chart per question (throughput, intake, latency, backlog, dead letters, tokens, model,
// tenants' spend against their budgets).
// Each chart's KQL is a file in queries/ (workbook-*.kql), loaded at compile time, so the
// docs, the tests and the workbook read the same text (docs/monitoring.md).

@description('Azure region of the workbook.')
param location string

@description('Name shown in the Workbooks gallery.')
param displayName string

@description('Resource id of the Application Insights component the charts query.')
param appInsightsId string

@description('Tags applied to the workbook.')
param tags object = {}

// Every chart runs in the component (classic table names) over the workbook's time range.
var chartDefaults = {
  version: 'KqlItem/1.0'
  size: 0
  timeContextFromParameter: 'TimeRange'
  queryType: 0
  resourceType: 'microsoft.insights/components'
}

var content = {
  version: 'Notebook/1.0'
  items: [
    {
      type: 1
      name: 'title'
      content: {
        json: '## Inferbus\nRequests through the doors, the request queues and the model, from the app\'s OpenTelemetry metrics (customMetrics) and spans (requests, dependencies). Metrics are exact; span charts are sampled (itemCount).'
      }
    }
    {
      type: 9
      name: 'parameters'
      content: {
        version: 'KqlParameterItem/1.0'
        parameters: [
          {
            id: 'time-range'
            version: 'KqlParameterItem/1.0'
            name: 'TimeRange'
            label: 'Time range'
            type: 4
            isRequired: true
            value: {
              durationMs: 86400000
            }
            typeSettings: {
              allowCustom: true
              selectableValues: [
                {
                  durationMs: 3600000
                }
                {
                  durationMs: 14400000
                }
                {
                  durationMs: 86400000
                }
                {
                  durationMs: 259200000
                }
                {
                  durationMs: 604800000
                }
              ]
            }
          }
        ]
        style: 'pills'
        queryType: 0
        resourceType: 'microsoft.insights/components'
      }
    }
    {
      type: 3
      name: 'throughput'
      content: union(chartDefaults, {
        title: 'Throughput: request messages settled, by outcome'
        query: loadTextContent('queries/workbook-throughput.kql')
        visualization: 'areachart'
      })
    }
    {
      type: 3
      name: 'intake'
      content: union(chartDefaults, {
        title: 'Intake: submissions accepted and refused, by door and reason'
        query: loadTextContent('queries/workbook-intake.kql')
        visualization: 'timechart'
      })
    }
    {
      type: 3
      name: 'latency'
      content: union(chartDefaults, {
        title: 'End-to-end latency (s): intake to the final process span, p50 / p90 / p99'
        query: loadTextContent('queries/workbook-latency.kql')
        visualization: 'timechart'
      })
    }
    {
      type: 3
      name: 'backlog'
      content: union(chartDefaults, {
        title: 'Backlog: messages per request queue and state'
        query: loadTextContent('queries/workbook-backlog.kql')
        visualization: 'timechart'
      })
    }
    {
      type: 3
      name: 'oldest-age'
      content: union(chartDefaults, {
        title: 'Oldest active message per request queue (s)'
        query: loadTextContent('queries/workbook-oldest-age.kql')
        visualization: 'timechart'
      })
    }
    {
      type: 3
      name: 'deadletters'
      content: union(chartDefaults, {
        title: 'Dead letters by reason and queue'
        query: loadTextContent('queries/workbook-deadletters.kql')
        visualization: 'barchart'
      })
    }
    {
      type: 3
      name: 'tokens'
      content: union(chartDefaults, {
        title: 'Model tokens per tenant (input, output)'
        query: loadTextContent('queries/workbook-tokens.kql')
        visualization: 'barchart'
      })
    }
    {
      type: 3
      name: 'tenants'
      content: union(chartDefaults, {
        title: 'Tenants: tokens, cost and budgets'
        query: loadTextContent('queries/workbook-tenants.kql')
        visualization: 'table'
      })
    }
    {
      type: 3
      name: 'model-duration'
      content: union(chartDefaults, {
        title: 'Model call duration per model (s): average and maximum'
        query: loadTextContent('queries/workbook-model-duration.kql')
        visualization: 'timechart'
      })
    }
  ]
  fallbackResourceIds: [
    appInsightsId
  ]
  '$schema': 'https://github.com/Microsoft/Application-Insights-Workbooks/blob/master/schema/workbook.json'
}

// A workbook's name is a GUID; this one is stable per component and display name, so a
// deployment updates the workbook in place.
resource workbook 'Microsoft.Insights/workbooks@2023-06-01' = {
  name: guid(appInsightsId, displayName)
  location: location
  tags: tags
  kind: 'shared'
  properties: {
    displayName: displayName
    category: 'workbook'
    sourceId: appInsightsId
    serializedData: string(content)
  }
}

output id string = workbook.id
