<#
.SYNOPSIS
    Installs (or upgrades) the NVIDIA GPU exporter, Prometheus and Grafana on Windows, each as a service.

.DESCRIPTION
    Run from an elevated PowerShell in a checkout or source archive of this project (docs/windows.md):

        powershell -ExecutionPolicy Bypass -File install\windows-all-in-one.ps1

    * the exporter: pip-installed into a regular Python 3.10+ (the py launcher, or -Python) and registered as the
      service nvidia_gpu_exporter by `nvidia_gpu_exporter install`, listening on :9835;
    * Prometheus, run as a service by WinSW, scraping it and evaluating deploy\prometheus's alert rules,
      listening on 127.0.0.1:9090 only;
    * Grafana, run as a service by WinSW, with the Prometheus data source and deploy\grafana's dashboards
      provisioned, on :3000 (admin/admin, changed at first login).

    Every download is pinned and checked against the digest in install\windows\stack.psd1 (generated, with every
    version, URL and port, by deploy/build_stack.py). Running the script again upgrades in place: the services
    are stopped, the new versions unpacked, the configuration rewritten and the services started again.
    Prometheus' and Grafana's data live under -DataDir and survive upgrades and uninstalls
    (windows-uninstall.ps1 -RemoveData deletes them). No firewall rule is created unless -OpenFirewall is given.

.PARAMETER InstallDir
    Program folder (default: $env:ProgramFiles\nvidia-gpu-exporter).
.PARAMETER DataDir
    Data, logs and the download cache (default: $env:ProgramData\nvidia-gpu-exporter).
.PARAMETER Python
    A regular (not virtual-environment) Python 3.10+ interpreter. Default: the py launcher's Python 3.
.PARAMETER Package
    What pip installs. Default: this release from PyPI; a wheel path or '.[windows]' installs a local build.
.PARAMETER ExporterFlag
    Extra exporter flags, e.g. -ExporterFlag '--collect.backend=nvml'.
.PARAMETER OpenFirewall
    Allow inbound TCP to the exporter (9835) and Grafana (3000) from -FirewallRemoteAddress.
.PARAMETER FirewallRemoteAddress
    The remote addresses those rules allow (default LocalSubnet).
#>
[CmdletBinding()]
param(
    [string]$InstallDir = (Join-Path $env:ProgramFiles 'nvidia-gpu-exporter'),
    [string]$DataDir = (Join-Path $env:ProgramData 'nvidia-gpu-exporter'),
    [string]$Python = '',
    [string]$Package = '',
    [string[]]$ExporterFlag = @(),
    [switch]$OpenFirewall,
    [string]$FirewallRemoteAddress = 'LocalSubnet'
)

Set-StrictMode -Version 3.0
$ErrorActionPreference = 'Stop'
$ProgressPreference = 'SilentlyContinue'  # Invoke-WebRequest is many times slower with the progress bar

$SourceDir = Split-Path -Parent $PSScriptRoot
$StackDir = Join-Path $PSScriptRoot 'windows'
$Stack = Import-PowerShellDataFile -Path (Join-Path $StackDir 'stack.psd1')

function Assert-Administrator {
    $identity = [Security.Principal.WindowsIdentity]::GetCurrent()
    $principal = New-Object Security.Principal.WindowsPrincipal($identity)
    if (-not $principal.IsInRole([Security.Principal.WindowsBuiltInRole]::Administrator)) {
        throw 'Run this script from an elevated (Administrator) PowerShell: it installs services.'
    }
}

function Invoke-Checked {
    param([string]$FilePath, [string[]]$ArgumentList)
    & $FilePath @ArgumentList
    if ($LASTEXITCODE -ne 0) {
        throw "$FilePath $($ArgumentList -join ' ') failed with exit code $LASTEXITCODE"
    }
}

function Get-VerifiedDownload {
    # The cached file when its digest matches, else a fresh download that must match.
    param([hashtable]$Item)
    $cache = Join-Path $DataDir 'downloads'
    New-Item -ItemType Directory -Force -Path $cache | Out-Null
    $path = Join-Path $cache $Item.File
    if (Test-Path -LiteralPath $path) {
        if ((Get-FileHash -LiteralPath $path -Algorithm $Item.Algorithm).Hash -eq $Item.Digest) {
            return $path
        }
        Remove-Item -LiteralPath $path -Force
    }
    Write-Host "Downloading $($Item.Url)"
    [Net.ServicePointManager]::SecurityProtocol = [Net.SecurityProtocolType]::Tls12
    Invoke-WebRequest -UseBasicParsing -Uri $Item.Url -OutFile "$path.partial"
    $actual = (Get-FileHash -LiteralPath "$path.partial" -Algorithm $Item.Algorithm).Hash
    if ($actual -ne $Item.Digest) {
        Remove-Item -LiteralPath "$path.partial" -Force
        throw "$($Item.File): $($Item.Algorithm) is $actual, expected $($Item.Digest); not installing it"
    }
    Move-Item -LiteralPath "$path.partial" -Destination $path -Force
    return $path
}

function Expand-Pinned {
    # Unpacks a verified archive into $Destination\<its folder>, replacing an older copy of the same version.
    param([hashtable]$Item, [string]$Destination)
    $archive = Get-VerifiedDownload -Item $Item
    $target = Join-Path $Destination $Item.Folder
    if (Test-Path -LiteralPath $target) {
        Remove-Item -LiteralPath $target -Recurse -Force
    }
    if ($Item.File.EndsWith('.zip')) {
        Expand-Archive -LiteralPath $archive -DestinationPath $Destination -Force
    } else {
        Invoke-Checked -FilePath "$env:SystemRoot\System32\tar.exe" -ArgumentList @('-xzf', $archive, '-C', $Destination)
    }
    # Other versions left by an earlier install go: the configuration and the data live outside them.
    $prefix = $Item.Folder.Split('-')[0] + '-'
    Get-ChildItem -LiteralPath $Destination -Directory |
        Where-Object { $_.Name.StartsWith($prefix) -and $_.Name -ne $Item.Folder } |
        Remove-Item -Recurse -Force
}

function Write-Template {
    # Copies a generated file of install\windows with the install and data folders filled in.
    param([string]$Name, [string]$Destination)
    $text = Get-Content -LiteralPath (Join-Path $StackDir $Name) -Raw
    $text = $text.Replace($Stack.InstallToken, $InstallDir).Replace($Stack.DataToken, $DataDir)
    New-Item -ItemType Directory -Force -Path (Split-Path -Parent $Destination) | Out-Null
    [IO.File]::WriteAllText($Destination, $text, (New-Object Text.UTF8Encoding($false)))
}

function Test-Service {
    param([string]$Name)
    return $null -ne (Get-Service -Name $Name -ErrorAction SilentlyContinue)
}

function Stop-IfRunning {
    param([string]$Name)
    $service = Get-Service -Name $Name -ErrorAction SilentlyContinue
    if ($null -ne $service -and $service.Status -ne 'Stopped') {
        Stop-Service -Name $Name -Force
        $service.WaitForStatus('Stopped', [TimeSpan]::FromSeconds(60))
    }
}

function Install-WinSWService {
    # WinSW runs as <service id>.exe beside <service id>.xml; `install` registers it once, later runs refresh both.
    param([string]$Name, [string]$Folder)
    $wrapper = Join-Path $Folder "$Name.exe"
    Copy-Item -LiteralPath (Get-VerifiedDownload -Item $Stack.Downloads.Winsw) -Destination $wrapper -Force
    Write-Template -Name "$Name.xml" -Destination (Join-Path $Folder "$Name.xml")
    if (-not (Test-Service -Name $Name)) {
        Invoke-Checked -FilePath $wrapper -ArgumentList @('install')
    }
}

function Resolve-Python {
    if ($Python) {
        return @($Python)
    }
    if (Get-Command py.exe -ErrorAction SilentlyContinue) {
        return @('py.exe', '-3')
    }
    throw 'No Python found: install Python 3.10+ from python.org (with the py launcher), or pass -Python.'
}

function Install-Exporter {
    $python = @(Resolve-Python)
    $interpreter = $python[0]
    $prefix = @($python | Select-Object -Skip 1)
    $check = 'import sys; sys.exit(0 if sys.version_info >= (3, 10) and sys.prefix == sys.base_prefix else 1)'
    & $interpreter @prefix -c $check
    if ($LASTEXITCODE -ne 0) {
        throw "$($python -join ' ') is not a regular Python 3.10+ (a virtual environment cannot host the service)"
    }
    $spec = if ($Package) { $Package } else { $Stack.Package }
    Invoke-Checked -FilePath $interpreter -ArgumentList ($prefix + @('-m', 'pip', 'install', '--upgrade', $spec))
    $flags = @($Stack.ExporterFlags) + $ExporterFlag
    # Registers the service, or reconfigures it in place with these flags.
    Invoke-Checked -FilePath $interpreter -ArgumentList ($prefix + @('-m', 'nvidia_gpu_exporter', 'install') + $flags)
}

function Install-Prometheus {
    $folder = Join-Path $InstallDir 'prometheus'
    New-Item -ItemType Directory -Force -Path (Join-Path $folder 'rules'), (Join-Path $DataDir 'prometheus') | Out-Null
    Expand-Pinned -Item $Stack.Downloads.Prometheus -Destination $folder
    Write-Template -Name 'prometheus.yml' -Destination (Join-Path $folder 'prometheus.yml')
    foreach ($rule in $Stack.Rules) {
        Copy-Item -LiteralPath (Join-Path $SourceDir "deploy\prometheus\$rule") -Destination (Join-Path $folder 'rules') -Force
    }
    $promtool = Join-Path $folder "$($Stack.Downloads.Prometheus.Folder)\promtool.exe"
    Invoke-Checked -FilePath $promtool -ArgumentList @('check', 'config', (Join-Path $folder 'prometheus.yml'))
    Install-WinSWService -Name $Stack.PrometheusService -Folder $folder
}

function Install-Grafana {
    $folder = Join-Path $InstallDir 'grafana'
    Expand-Pinned -Item $Stack.Downloads.Grafana -Destination $folder
    $grafanaHome = Join-Path $folder $Stack.Downloads.Grafana.Folder
    Write-Template -Name 'grafana\custom.ini' -Destination (Join-Path $grafanaHome 'conf\custom.ini')
    foreach ($kind in @('datasources', 'dashboards')) {
        $provisioning = Join-Path $folder "provisioning\$kind"
        New-Item -ItemType Directory -Force -Path $provisioning | Out-Null
        Get-ChildItem -LiteralPath (Join-Path $StackDir "grafana\$kind") -File | ForEach-Object {
            Write-Template -Name "grafana\$kind\$($_.Name)" -Destination (Join-Path $provisioning $_.Name)
        }
    }
    $dashboards = Join-Path $folder 'dashboards'
    New-Item -ItemType Directory -Force -Path $dashboards, (Join-Path $DataDir 'grafana') | Out-Null
    foreach ($board in $Stack.Dashboards) {
        Copy-Item -LiteralPath (Join-Path $SourceDir "deploy\grafana\$board") -Destination $dashboards -Force
    }
    Install-WinSWService -Name $Stack.GrafanaService -Folder $folder
}

function Set-FirewallRules {
    foreach ($rule in $Stack.FirewallRules) {
        Get-NetFirewallRule -DisplayName $rule.Name -ErrorAction SilentlyContinue | Remove-NetFirewallRule
        New-NetFirewallRule -DisplayName $rule.Name -Group $Stack.FirewallGroup -Direction Inbound -Action Allow `
            -Protocol TCP -LocalPort $rule.Port -RemoteAddress $FirewallRemoteAddress -Profile @('Domain', 'Private') | Out-Null
        Write-Host "Firewall: inbound TCP $($rule.Port) allowed from $FirewallRemoteAddress ($($rule.Name))"
    }
}

Assert-Administrator
foreach ($required in @("deploy\prometheus\$($Stack.Rules[0])", "deploy\grafana\$($Stack.Dashboards[0])")) {
    if (-not (Test-Path -LiteralPath (Join-Path $SourceDir $required))) {
        throw "$required not found under ${SourceDir}: run the script from a checkout or source archive of the project"
    }
}
New-Item -ItemType Directory -Force -Path $InstallDir, (Join-Path $DataDir 'logs') | Out-Null
foreach ($name in @($Stack.GrafanaService, $Stack.PrometheusService, $Stack.ExporterService)) {
    Stop-IfRunning -Name $name
}
Install-Exporter
Install-Prometheus
Install-Grafana
if ($OpenFirewall) {
    Set-FirewallRules
}
foreach ($name in @($Stack.ExporterService, $Stack.PrometheusService, $Stack.GrafanaService)) {
    Start-Service -Name $name
}
Write-Host "Installed $($Stack.Version): metrics http://localhost:$($Stack.Ports.Exporter)/metrics," `
    "Prometheus http://127.0.0.1:$($Stack.Ports.Prometheus), Grafana http://localhost:$($Stack.Ports.Grafana)"
if (-not $OpenFirewall) {
    Write-Host 'No firewall rule was added: other machines cannot reach the exporter or Grafana (see -OpenFirewall).'
}
