// Parameters of stage 1 (main.bicep) for the Azure Developer CLI: `azd up`, `azd provision`.
//
// azd prefers <module>.bicepparam to <module>.parameters.json and compiles this file with the
// values of the azd environment as environment variables (`azd env set NAME value`). The az
// CLI path keeps passing main.parameters.json, which azd therefore never reads.
//
// Optional values fall back to main.bicep's own defaults when unset
// (tests/infra/test_azd.py keeps the fallbacks equal to those defaults).

using 'main.bicep'

// The azd environment name (`azd env new <name>`): 2 to 20 characters, as main.bicep requires.
param environmentName = readEnvironmentVariable('AZURE_ENV_NAME')

// Client id of the API's Entra app registration: the preprovision hook
// (infra/hooks/api_registration.py) creates or reuses one and sets it when it is unset
// (docs/deploy.md). Empty only when the hook did not run: main.bicep's @minLength refuses it.
param apiClientId = readEnvironmentVariable('INFERBUS_API_CLIENT_ID', '')

param allowedModels = readEnvironmentVariable('INFERBUS_ALLOWED_MODELS', '')
param defaultModel = readEnvironmentVariable('INFERBUS_DEFAULT_MODEL', '')
param modelCatalog = readEnvironmentVariable('INFERBUS_MODEL_CATALOG', '')

// A real model by default: only the exact value local selects the deterministic stand-in.
param modelProvider = readEnvironmentVariable('INFERBUS_MODEL_PROVIDER', 'azure_openai') == 'local' ? 'local' : 'azure_openai'
param azureOpenAIEndpoint = readEnvironmentVariable('INFERBUS_AZURE_OPENAI_ENDPOINT', '')

// The queue lane's model deployment (infra/README.md, "The queue lane's model").
param queueModelName = readEnvironmentVariable('INFERBUS_QUEUE_MODEL_NAME', 'gpt-5.1')
param queueModelVersion = readEnvironmentVariable('INFERBUS_QUEUE_MODEL_VERSION', '2025-11-13')
param queueModelSku = readEnvironmentVariable('INFERBUS_QUEUE_MODEL_SKU', 'GlobalStandard')
param queueModelCapacity = int(readEnvironmentVariable('INFERBUS_QUEUE_MODEL_CAPACITY', '30'))

// Tenants direct Service Bus producers may name, comma-separated (empty: none).
param producerTenants = readEnvironmentVariable('INFERBUS_PRODUCER_TENANTS', '')

// The postdeploy hook passes the same audience to stage 2 (webhookEntraApplicationIdOrUri).
param webhookTokenAudience = readEnvironmentVariable('INFERBUS_WEBHOOK_TOKEN_AUDIENCE', '')
param webhookTokenIssuer = readEnvironmentVariable('INFERBUS_WEBHOOK_TOKEN_ISSUER', '')

param actionGroupId = readEnvironmentVariable('INFERBUS_ACTION_GROUP_ID', '')

// Private networking (infra/README.md, "Private networking"): only the exact value true
// turns it on.
param privateNetworking = readEnvironmentVariable('INFERBUS_PRIVATE_NETWORKING', 'false') == 'true'

// The operators' data roles (docs/operations.md, "Roles for operators"): granted to the
// principal azd signed in with (AZURE_PRINCIPAL_ID, a user unless
// INFERBUS_OPERATOR_PRINCIPAL_TYPE says otherwise; unset: no grant), or to
// INFERBUS_OPERATOR_PRINCIPAL_ID instead (a group: INFERBUS_OPERATOR_PRINCIPAL_TYPE Group).
// INFERBUS_OPERATOR_ROLES off grants nothing.
param operatorPrincipalId = (readEnvironmentVariable('INFERBUS_OPERATOR_ROLES', '') == 'off') ? '' : readEnvironmentVariable('INFERBUS_OPERATOR_PRINCIPAL_ID', readEnvironmentVariable('AZURE_PRINCIPAL_ID', ''))
param operatorPrincipalType = readEnvironmentVariable('INFERBUS_OPERATOR_PRINCIPAL_TYPE', 'User')
