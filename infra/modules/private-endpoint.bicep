// One private endpoint of a service (main.bicep's privateNetworking), in the private
// endpoints subnet of modules/network.bicep, with a DNS zone group that writes its address
// into the service's private DNS zones (one record per zone).

@description('Azure region of the private endpoint (the virtual network\'s).')
param location string

@description('Private endpoint name.')
param name string

@description('Resource id of the private endpoints subnet.')
param subnetId string

@description('Resource id of the service the endpoint connects to.')
param serviceId string

@description('Sub-resource (group id) of the service: namespace (Service Bus), blob, queue or table (storage), topic (Event Grid topic and namespace), account (Azure OpenAI).')
@allowed([
  'namespace'
  'blob'
  'queue'
  'table'
  'topic'
  'account'
])
param groupId string

@description('Resource ids of the private DNS zones the endpoint\'s address is registered in.')
param privateDnsZoneIds array

@description('Tags applied to the private endpoint.')
param tags object = {}

resource endpoint 'Microsoft.Network/privateEndpoints@2025-09-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    subnet: {
      id: subnetId
    }
    privateLinkServiceConnections: [
      {
        name: name
        properties: {
          privateLinkServiceId: serviceId
          groupIds: [
            groupId
          ]
        }
      }
    ]
  }
}

resource zoneGroup 'Microsoft.Network/privateEndpoints/privateDnsZoneGroups@2025-09-01' = {
  parent: endpoint
  name: 'default'
  properties: {
    privateDnsZoneConfigs: [
      for zoneId in privateDnsZoneIds: {
        name: replace(last(split(zoneId, '/')), '.', '-')
        properties: {
          privateDnsZoneId: zoneId
        }
      }
    ]
  }
}

output id string = endpoint.id
