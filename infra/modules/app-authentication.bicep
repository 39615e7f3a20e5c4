// App Service authentication (Easy Auth) in front of the request API.
//
// The app reads the caller's tenant from the x-ms-client-principal header, which the
// platform sets from a validated Entra ID token and strips from incoming requests only
// while authentication is enabled. So authentication is not optional: anonymous callers
// get 401 before any code runs. Event Grid webhooks are excluded because they
// authenticate on their own (extension system keys, the function key, a shared secret
// or an Entra token validated by the app).

@description('Name of the Function App.')
param appName string

@description('Application (client) id of the Entra app registration that represents the Inferbus API.')
param apiClientId string

@description('Token audiences the API accepts, e.g. [ \'api://inferbus-prod\' ]. Empty accepts the client id and api://<client id>.')
param allowedAudiences array = []

@description('Entra tenant that issues the tokens.')
param tenantId string = subscription().tenantId

@description('Paths that authenticate without App Service authentication (Event Grid deliveries), and the OpenAPI document, which holds no secret (code generators and API Management import it).')
param excludedPaths array = [
  '/runtime/webhooks/blobs'
  '/runtime/webhooks/eventgrid'
  '/api/v1/events'
  '/api/openapi.json'
  // The API page and its files (shared/entrypoints/http/docs), public like the document.
  '/api/docs'
  '/api/docs/swagger-ui.css'
  '/api/docs/swagger-ui-bundle.js'
  '/api/docs/favicon-32x32.png'
  '/api/docs/swagger-initializer.js'
]

resource site 'Microsoft.Web/sites@2025-03-01' existing = {
  name: appName
}

resource authentication 'Microsoft.Web/sites/config@2025-03-01' = {
  parent: site
  name: 'authsettingsV2'
  properties: {
    platform: {
      enabled: true
    }
    globalValidation: {
      requireAuthentication: true
      unauthenticatedClientAction: 'Return401'
      excludedPaths: excludedPaths
    }
    httpSettings: {
      requireHttps: true
    }
    identityProviders: {
      azureActiveDirectory: {
        enabled: true
        registration: {
          clientId: apiClientId
          openIdIssuer: '${environment().authentication.loginEndpoint}${tenantId}/v2.0'
        }
        validation: {
          allowedAudiences: empty(allowedAudiences) ? [apiClientId, 'api://${apiClientId}'] : allowedAudiences
        }
      }
    }
    login: {
      tokenStore: {
        enabled: false
      }
    }
  }
}
