<#
.SYNOPSIS
    Removes what windows-all-in-one.ps1 installed: the three services, the program folder and the firewall rules.

.DESCRIPTION
    Run from an elevated PowerShell (docs/windows.md):

        powershell -ExecutionPolicy Bypass -File install\windows-uninstall.ps1

    Prometheus' time series, Grafana's database and the logs under -DataDir are kept, so that a later install
    finds them again; -RemoveData deletes them too. The exporter's Python package is kept unless -RemovePackage.

.PARAMETER InstallDir
    The program folder given to the installer (default: $env:ProgramFiles\nvidia-gpu-exporter).
.PARAMETER DataDir
    The data folder given to the installer (default: $env:ProgramData\nvidia-gpu-exporter).
.PARAMETER Python
    The Python the exporter was installed into. Default: the py launcher's Python 3.
.PARAMETER RemoveData
    Also delete -DataDir (time series, dashboards' state, logs, the download cache).
.PARAMETER RemovePackage
    Also pip-uninstall the exporter's package.
#>
[CmdletBinding()]
param(
    [string]$InstallDir = (Join-Path $env:ProgramFiles 'nvidia-gpu-exporter'),
    [string]$DataDir = (Join-Path $env:ProgramData 'nvidia-gpu-exporter'),
    [string]$Python = '',
    [switch]$RemoveData,
    [switch]$RemovePackage
)

Set-StrictMode -Version 3.0
$ErrorActionPreference = 'Stop'

$Stack = Import-PowerShellDataFile -Path (Join-Path $PSScriptRoot 'windows\stack.psd1')

$identity = [Security.Principal.WindowsIdentity]::GetCurrent()
if (-not (New-Object Security.Principal.WindowsPrincipal($identity)).IsInRole(
        [Security.Principal.WindowsBuiltInRole]::Administrator)) {
    throw 'Run this script from an elevated (Administrator) PowerShell: it removes services.'
}

function Remove-WinSWService {
    param([string]$Name, [string]$Folder)
    $wrapper = Join-Path $Folder "$Name.exe"
    if (-not (Get-Service -Name $Name -ErrorAction SilentlyContinue)) {
        return
    }
    if (Test-Path -LiteralPath $wrapper) {
        & $wrapper stop
        & $wrapper uninstall
        if ($LASTEXITCODE -ne 0) {
            throw "$wrapper uninstall failed with exit code $LASTEXITCODE"
        }
    } else {
        # The wrapper is gone (a removed folder): the SCM can still stop and delete the service.
        Stop-Service -Name $Name -Force -ErrorAction SilentlyContinue
        & "$env:SystemRoot\System32\sc.exe" delete $Name
    }
    Write-Host "Removed the service $Name"
}

$interpreter = if ($Python) { $Python } else { 'py.exe' }
$prefix = if ($Python) { @() } else { @('-3') }

Remove-WinSWService -Name $Stack.GrafanaService -Folder (Join-Path $InstallDir 'grafana')
Remove-WinSWService -Name $Stack.PrometheusService -Folder (Join-Path $InstallDir 'prometheus')
if (Get-Service -Name $Stack.ExporterService -ErrorAction SilentlyContinue) {
    & $interpreter @prefix -m nvidia_gpu_exporter uninstall
    if ($LASTEXITCODE -ne 0) {
        throw "nvidia_gpu_exporter uninstall failed with exit code $LASTEXITCODE"
    }
    Write-Host "Removed the service $($Stack.ExporterService)"
}
if ($RemovePackage) {
    & $interpreter @prefix -m pip uninstall --yes nvidia-gpu-exporter
}
Get-NetFirewallRule -Group $Stack.FirewallGroup -ErrorAction SilentlyContinue | Remove-NetFirewallRule
if (Test-Path -LiteralPath $InstallDir) {
    Remove-Item -LiteralPath $InstallDir -Recurse -Force
}
if ($RemoveData) {
    if (Test-Path -LiteralPath $DataDir) {
        Remove-Item -LiteralPath $DataDir -Recurse -Force
    }
    Write-Host "Removed $DataDir"
} else {
    Write-Host "Kept the data in $DataDir (run again with -RemoveData to delete it)"
}
