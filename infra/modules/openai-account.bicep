// An Azure OpenAI account for the Global Batch lane (modules/openai-batch.bicep creates it
// through this module when no existing account is named). Microsoft Entra ID only: the
// account accepts no keys, so a data role is the only way in (infra/README.md, Global Batch).

@description('Azure region of the account.')
param location string

@description('Account name, also its custom subdomain (<name>.openai.azure.com), which must be globally unique.')
@minLength(2)
@maxLength(64)
param name string

@description('Public network access: Enabled (Microsoft Entra ID only) or Disabled (main.bicep\'s privateNetworking: reached through its private endpoint from the app\'s VNet integration).')
@allowed([
  'Enabled'
  'Disabled'
])
param publicNetworkAccess string = 'Enabled'

@description('Tags applied to the account.')
param tags object = {}

resource account 'Microsoft.CognitiveServices/accounts@2026-07-01' = {
  name: name
  location: location
  tags: tags
  kind: 'OpenAI'
  sku: {
    name: 'S0'
  }
  // The account's own identity holds no role: it is there for account-side features
  // (customer-managed keys) and reaches none of the app's data.
  identity: {
    type: 'SystemAssigned'
  }
  properties: {
    customSubDomainName: name
    disableLocalAuth: true
    publicNetworkAccess: publicNetworkAccess
    networkAcls: {
      defaultAction: (publicNetworkAccess == 'Disabled') ? 'Deny' : 'Allow'
    }
  }
}

output id string = account.id
output name string = account.name
