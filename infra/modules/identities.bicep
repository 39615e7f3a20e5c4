// User-assigned managed identities: one for the Function App, one for Event Grid delivery.
// User-assigned (not system-assigned) so role assignments can be created before the
// resources that use them, and survive a re-creation of those resources.

@description('Azure region of the identities.')
param location string

@description('Name of the identity the Function App runs as.')
param appIdentityName string

@description('Name of the identity Event Grid uses to write dead-lettered events.')
param eventGridIdentityName string

@description('Tags applied to every resource.')
param tags object = {}

resource appIdentity 'Microsoft.ManagedIdentity/userAssignedIdentities@2024-11-30' = {
  name: appIdentityName
  location: location
  tags: tags
}

resource eventGridIdentity 'Microsoft.ManagedIdentity/userAssignedIdentities@2024-11-30' = {
  name: eventGridIdentityName
  location: location
  tags: tags
}

output appIdentityId string = appIdentity.id
output appIdentityClientId string = appIdentity.properties.clientId
output appIdentityPrincipalId string = appIdentity.properties.principalId
output eventGridIdentityId string = eventGridIdentity.id
output eventGridIdentityPrincipalId string = eventGridIdentity.properties.principalId
