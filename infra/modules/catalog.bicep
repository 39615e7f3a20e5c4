// Names and entity definitions shared by every Inferbus template.
//
// This file is the Azure side of a contract: container names are the defaults of the app
// settings in shared/settings.py, and the Service Bus entities mirror
// infra/local/servicebus-emulator.json (tests/infra compares the two). Templates import
// these constants with `import { ... } from 'catalog.bicep'`; nothing here depends on a
// deployment, so the values are fixed at compile time.

@export()
@description('Blob containers of the data storage account. Keys are the roles, values the container names.')
var dataContainers = {
  incoming: 'incoming'
  inputs: 'inputs'
  results: 'results'
  jobs: 'jobs'
  idempotency: 'idempotency'
  ledgers: 'ledgers'
  eventGridDeadLetters: 'eventgrid-deadletters'
}

@export()
@description('Containers the app reads and writes (Storage Blob Data Contributor is granted on each, not on the account).')
var appContainerNames = [
  dataContainers.incoming
  dataContainers.inputs
  dataContainers.results
  dataContainers.jobs
  dataContainers.idempotency
  dataContainers.ledgers
]

@export()
@description('Container of the host storage account that receives Flex Consumption deployment packages.')
var deploymentContainerName = 'app-package'

@export()
@description('Service Bus queue names.')
var queueNames = {
  requests: 'inference-requests'
  ordered: 'inference-ordered'
}

@export()
@description('Service Bus topic that carries results to downstream consumers.')
var resultsTopicName = 'inference-results'

@export()
@description('Service Bus queues with their ARM properties.')
var serviceBusQueues = [
  {
    name: queueNames.requests
    properties: {
      lockDuration: 'PT1M'
      maxDeliveryCount: 10
      defaultMessageTimeToLive: 'P1D'
      deadLetteringOnMessageExpiration: true
      requiresDuplicateDetection: true
      duplicateDetectionHistoryTimeWindow: 'PT10M'
      requiresSession: false
    }
  }
  {
    name: queueNames.ordered
    properties: {
      lockDuration: 'PT1M'
      maxDeliveryCount: 10
      defaultMessageTimeToLive: 'P1D'
      deadLetteringOnMessageExpiration: true
      requiresDuplicateDetection: true
      duplicateDetectionHistoryTimeWindow: 'PT10M'
      requiresSession: true
    }
  }
]

@export()
@description('The results topic, its subscriptions and the single rule of each subscription.')
var resultsTopic = {
  name: resultsTopicName
  properties: {
    defaultMessageTimeToLive: 'P7D'
    requiresDuplicateDetection: true
    duplicateDetectionHistoryTimeWindow: 'PT10M'
  }
  subscriptions: [
    {
      name: 'high-priority'
      properties: {
        lockDuration: 'PT1M'
        maxDeliveryCount: 10
        defaultMessageTimeToLive: 'P7D'
        deadLetteringOnMessageExpiration: true
        requiresSession: false
      }
      rule: {
        name: 'high-priority'
        properties: {
          filterType: 'SqlFilter'
          sqlFilter: {
            sqlExpression: 'priority = \'high\''
          }
        }
      }
    }
    {
      name: 'human-review'
      properties: {
        lockDuration: 'PT1M'
        maxDeliveryCount: 10
        defaultMessageTimeToLive: 'P7D'
        deadLetteringOnMessageExpiration: true
        requiresSession: false
      }
      rule: {
        name: 'review-required'
        properties: {
          filterType: 'SqlFilter'
          sqlFilter: {
            sqlExpression: 'review_required = TRUE'
          }
        }
      }
    }
    {
      name: 'audit'
      properties: {
        lockDuration: 'PT1M'
        maxDeliveryCount: 10
        defaultMessageTimeToLive: 'P7D'
        deadLetteringOnMessageExpiration: true
        requiresSession: false
      }
      // Declared explicitly so the catch-all intent is visible (and reviewed) rather than implied.
      rule: {
        name: '$Default'
        properties: {
          filterType: 'SqlFilter'
          sqlFilter: {
            sqlExpression: '1=1'
          }
        }
      }
    }
    {
      name: 'model-local-analyzer'
      properties: {
        lockDuration: 'PT1M'
        maxDeliveryCount: 10
        defaultMessageTimeToLive: 'P7D'
        deadLetteringOnMessageExpiration: true
        requiresSession: false
      }
      rule: {
        name: 'model-local-analyzer'
        properties: {
          filterType: 'CorrelationFilter'
          correlationFilter: {
            properties: {
              model_name: 'local-analyzer'
            }
          }
        }
      }
    }
  ]
}

@export()
@description('Derives every resource name from the environment name and a deterministic token, so the main and the second-stage templates agree without passing names around.')
func resourceNames(environmentName string, token string) object => {
  appIdentity: 'id-${environmentName}-app'
  eventGridIdentity: 'id-${environmentName}-eventgrid'
  logAnalytics: 'log-${environmentName}-${token}'
  appInsights: 'appi-${environmentName}-${token}'
  hostStorage: take('sthost${token}', 24)
  dataStorage: take('stdata${token}', 24)
  serviceBus: 'sb-${environmentName}-${token}'
  eventGridSystemTopic: 'evgst-${environmentName}-storage'
  eventGridTopic: 'evgt-${environmentName}-${token}'
  plan: 'plan-${environmentName}-${token}'
  functionApp: 'func-${environmentName}-${token}'
}
