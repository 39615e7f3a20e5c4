// Log Analytics workspace and the workspace-based Application Insights component.

@description('Azure region of the monitoring resources.')
param location string

@description('Name of the Log Analytics workspace.')
param logAnalyticsName string

@description('Name of the Application Insights component.')
param appInsightsName string

@description('Days of log retention in the workspace.')
@minValue(30)
@maxValue(730)
param retentionInDays int = 30

@description('When true, Application Insights accepts only Microsoft Entra authenticated telemetry (the app then needs APPLICATIONINSIGHTS_AUTHENTICATION_STRING and Monitoring Metrics Publisher, both provisioned).')
param disableLocalAuth bool = false

@description('Tags applied to every resource.')
param tags object = {}

resource workspace 'Microsoft.OperationalInsights/workspaces@2026-03-01' = {
  name: logAnalyticsName
  location: location
  tags: tags
  properties: {
    sku: {
      name: 'PerGB2018'
    }
    retentionInDays: retentionInDays
  }
}

resource appInsights 'Microsoft.Insights/components@2020-02-02' = {
  name: appInsightsName
  location: location
  tags: tags
  kind: 'web'
  properties: {
    Application_Type: 'web'
    WorkspaceResourceId: workspace.id
    IngestionMode: 'LogAnalytics'
    DisableLocalAuth: disableLocalAuth
  }
}

output workspaceId string = workspace.id
output appInsightsId string = appInsights.id
output appInsightsName string = appInsights.name
