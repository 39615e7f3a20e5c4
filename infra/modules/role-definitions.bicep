// Built-in Azure role definition ids used by Inferbus, as named constants.
// Source: https://learn.microsoft.com/azure/role-based-access-control/built-in-roles
// (tests/infra/test_roles.py holds the same table and fails if an id drifts).

@export()
@description('Built-in role definition ids (GUIDs), keyed by role.')
var roleDefinitionIds = {
  // Azure Service Bus Data Receiver
  serviceBusDataReceiver: '4f6d3b9b-027b-4f4c-9142-0e5a2a2247e0'
  // Azure Service Bus Data Sender
  serviceBusDataSender: '69a216fc-b8fb-44d8-bc22-1f3c2cd27a39'
  // Azure Service Bus Data Owner
  serviceBusDataOwner: '090c5cfd-751d-490a-894a-3ce6f1109419'
  // Storage Blob Data Owner
  storageBlobDataOwner: 'b7e6dc6d-f1e8-4753-8033-0f276bb0955b'
  // Storage Blob Data Contributor
  storageBlobDataContributor: 'ba92f5b4-2d11-453d-a403-e96b0029c9fe'
  // Storage Queue Data Contributor
  storageQueueDataContributor: '974c5e8b-45b9-4653-ba55-5f855dd0fb88'
  // EventGrid Data Sender
  eventGridDataSender: 'd5a91429-5739-47e2-a06b-3470a27159e7'
  // Monitoring Metrics Publisher
  monitoringMetricsPublisher: '3913510d-42f4-4e42-8a64-420c390055eb'
}
