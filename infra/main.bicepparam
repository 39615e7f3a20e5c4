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

// Required: client id of the API's Entra app registration (infra/README.md, "azd up").
param apiClientId = readEnvironmentVariable('INFERBUS_API_CLIENT_ID')

param allowedModels = readEnvironmentVariable('INFERBUS_ALLOWED_MODELS', 'local-analyzer')
param defaultModel = readEnvironmentVariable('INFERBUS_DEFAULT_MODEL', '')

// Only the exact value azure_openai selects Azure OpenAI; anything else keeps the local model.
param modelProvider = readEnvironmentVariable('INFERBUS_MODEL_PROVIDER', '') == 'azure_openai' ? 'azure_openai' : ''
param azureOpenAIEndpoint = readEnvironmentVariable('INFERBUS_AZURE_OPENAI_ENDPOINT', '')

// The postdeploy hook passes the same audience to stage 2 (webhookEntraApplicationIdOrUri).
param webhookTokenAudience = readEnvironmentVariable('INFERBUS_WEBHOOK_TOKEN_AUDIENCE', '')
param webhookTokenIssuer = readEnvironmentVariable('INFERBUS_WEBHOOK_TOKEN_ISSUER', '')

param actionGroupId = readEnvironmentVariable('INFERBUS_ACTION_GROUP_ID', '')
