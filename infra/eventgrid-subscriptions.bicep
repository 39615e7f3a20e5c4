// Second stage: Event Grid event subscriptions to the app's webhooks.
//
// Run after `func azure functionapp publish`: the blobs extension system key and the
// function keys are created by the Functions host when the code starts, and Event Grid
// validates a webhook endpoint when the subscription is created.
//
//   az deployment group create -g <rg> -f infra/eventgrid-subscriptions.bicep \
//     -p environmentName=<same as main>
//
// The keys are read here with listKeys and handed to the module as @secure() parameters,
// so they never appear in deployment inputs, outputs or history.

@description('The environmentName given to main.bicep (resource names derive from it).')
@minLength(2)
@maxLength(20)
param environmentName string

@description('Name of the blob-triggered function (source="EventGrid") that receives BlobCreated events.')
param blobFunctionName string = 'blob_intake'

@description('Route of the app\'s CloudEvents webhook, below the /api prefix.')
param eventsRoute string = 'v1/events'

@description('Create the custom topic subscriptions to the app\'s CloudEvents webhook (needs that function deployed).')
param subscribeEventsWebhook bool = true

@description('Optional Microsoft Entra application id or URI protecting the app (App Service authentication); when set, Event Grid also sends a bearer token to the CloudEvents webhook.')
param webhookEntraApplicationIdOrUri string = ''

var token = toLower(uniqueString(subscription().id, resourceGroup().id, environmentName))
// The names of main.bicep that this stage needs, derived the same way (tests/infra/test_azd.py
// fails if a derivation here differs from main.bicep's).
var names = {
  eventGridIdentity: 'id-${environmentName}-eventgrid'
  dataStorage: take('stdata${token}', 24)
  eventGridSystemTopic: 'evgst-${environmentName}-storage'
  eventGridTopic: 'evgt-${environmentName}-${token}'
  functionApp: 'func-${environmentName}-${token}'
}

resource site 'Microsoft.Web/sites@2025-03-01' existing = {
  name: names.functionApp
}

module subscriptions 'modules/eventgrid-subscriptions.bicep' = {
  name: 'eventgrid-subscriptions'
  params: {
    systemTopicName: names.eventGridSystemTopic
    topicName: names.eventGridTopic
    dataStorageAccountName: names.dataStorage
    eventGridIdentityName: names.eventGridIdentity
    appHostName: site.properties.defaultHostName
    blobFunctionName: blobFunctionName
    eventsRoute: eventsRoute
    subscribeEventsWebhook: subscribeEventsWebhook
    webhookEntraApplicationIdOrUri: webhookEntraApplicationIdOrUri
    blobsExtensionKey: listKeys('${site.id}/host/default', '2024-04-01').systemKeys.blobs_extension
    functionKey: listKeys('${site.id}/host/default', '2024-04-01').functionKeys.default
  }
}
