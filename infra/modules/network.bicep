// Private networking (main.bicep's privateNetworking): a virtual network with two subnets
// and the private DNS zones of the private endpoints (modules/private-endpoint.bicep).
//
// - snet-app: the Flex Consumption app's outbound VNet integration (virtualNetworkSubnetId
//   of the site), delegated to Microsoft.App/environments as Flex Consumption requires, with
//   a NAT gateway for the app's internet-bound calls.
// - snet-private-endpoints: the private endpoints of Service Bus, both storage accounts
//   (blob, queue, table), the Event Grid topic and namespace and the Azure OpenAI account.
//
// Each zone is linked to the virtual network, so the app resolves the services' public
// host names to their private endpoints. Zone names are those of the public Azure cloud.

@description('Azure region of the virtual network.')
param location string

@description('Virtual network name.')
param name string

@description('Address space of the virtual network.')
param addressPrefix string = '10.40.0.0/16'

@description('Subnet of the app\'s VNet integration (/27 at least; Flex Consumption takes one address per instance, so a /24 leaves room for 40 and more instances).')
param appSubnetPrefix string = '10.40.0.0/24'

@description('Subnet of the private endpoints.')
param privateEndpointSubnetPrefix string = '10.40.1.0/24'

@description('Tags applied to every resource.')
param tags object = {}

// Private DNS zones of the private endpoints, by the key main.bicep names them with.
var zoneNames = {
  blob: 'privatelink.blob.core.windows.net'
  queue: 'privatelink.queue.core.windows.net'
  table: 'privatelink.table.core.windows.net'
  serviceBus: 'privatelink.servicebus.windows.net'
  eventGrid: 'privatelink.eventgrid.azure.net'
  openAI: 'privatelink.openai.azure.com'
  cognitiveServices: 'privatelink.cognitiveservices.azure.com'
}
var zoneList = [
  zoneNames.blob
  zoneNames.queue
  zoneNames.table
  zoneNames.serviceBus
  zoneNames.eventGrid
  zoneNames.openAI
  zoneNames.cognitiveServices
]

// Internet-bound calls of the app (Application Insights ingestion, Entra sign-in, a model
// provider outside Azure) leave through snet-app too; new virtual networks have no default
// outbound access, so a NAT gateway with one static public address carries them.
resource natAddress 'Microsoft.Network/publicIPAddresses@2025-09-01' = {
  name: 'pip-${name}-nat'
  location: location
  tags: tags
  sku: {
    name: 'Standard'
  }
  properties: {
    publicIPAllocationMethod: 'Static'
    publicIPAddressVersion: 'IPv4'
  }
}

resource natGateway 'Microsoft.Network/natGateways@2025-09-01' = {
  name: 'ng-${name}'
  location: location
  tags: tags
  sku: {
    name: 'Standard'
  }
  properties: {
    idleTimeoutInMinutes: 4
    publicIpAddresses: [
      {
        id: natAddress.id
      }
    ]
  }
}

resource vnet 'Microsoft.Network/virtualNetworks@2025-09-01' = {
  name: name
  location: location
  tags: tags
  properties: {
    addressSpace: {
      addressPrefixes: [
        addressPrefix
      ]
    }
    subnets: [
      {
        name: 'snet-app'
        properties: {
          addressPrefix: appSubnetPrefix
          natGateway: {
            id: natGateway.id
          }
          delegations: [
            {
              name: 'flex-consumption'
              properties: {
                serviceName: 'Microsoft.App/environments'
              }
            }
          ]
        }
      }
      {
        name: 'snet-private-endpoints'
        properties: {
          addressPrefix: privateEndpointSubnetPrefix
          privateEndpointNetworkPolicies: 'Disabled'
        }
      }
    ]
  }
}

resource zones 'Microsoft.Network/privateDnsZones@2024-06-01' = [
  for zoneName in zoneList: {
    name: zoneName
    location: 'global'
    tags: tags
  }
]

resource zoneLinks 'Microsoft.Network/privateDnsZones/virtualNetworkLinks@2024-06-01' = [
  for (zoneName, index) in zoneList: {
    parent: zones[index]
    name: name
    location: 'global'
    tags: tags
    properties: {
      registrationEnabled: false
      virtualNetwork: {
        id: vnet.id
      }
    }
  }
]

output id string = vnet.id
output natAddressId string = natAddress.id
output appSubnetId string = vnet.properties.subnets[0].id
output privateEndpointSubnetId string = vnet.properties.subnets[1].id
// Each zone's id, by key (the zones above are created in this deployment).
output zoneIds object = {
  blob: resourceId('Microsoft.Network/privateDnsZones', zoneNames.blob)
  queue: resourceId('Microsoft.Network/privateDnsZones', zoneNames.queue)
  table: resourceId('Microsoft.Network/privateDnsZones', zoneNames.table)
  serviceBus: resourceId('Microsoft.Network/privateDnsZones', zoneNames.serviceBus)
  eventGrid: resourceId('Microsoft.Network/privateDnsZones', zoneNames.eventGrid)
  openAI: resourceId('Microsoft.Network/privateDnsZones', zoneNames.openAI)
  cognitiveServices: resourceId('Microsoft.Network/privateDnsZones', zoneNames.cognitiveServices)
}
