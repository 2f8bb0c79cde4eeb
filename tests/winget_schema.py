"""The rules of winget's multi-file manifest schemas (version 1.10.0) that the release's manifests rely on, restated
as JSON Schemas (draft 7, as winget's are) for tests/test_stack.py.

Source: microsoft/winget-cli, ``schemas/JSON/manifests/v1.10.0/manifest.{version,defaultLocale,installer}.1.10.0.json``
(https://github.com/microsoft/winget-cli/tree/master/schemas/JSON/manifests/v1.10.0, MIT license). They are not
vendored: this machine and CI cannot reach GitHub, so the rules are written out here, field by field: the required
fields, the pattern, length or enumeration of every field the release writes, and the names of every field the
published schema knows. The published schemas allow unknown fields; these do not (winget's own validator rejects
them, and a misspelt field would otherwise pass silently), so the field lists are the published ones, complete.
"""

from __future__ import annotations

from typing import Any

# PackageIdentifier: 2 to 8 dot-separated parts of 1 to 32 characters, none of . \ / : * ? " < > | whitespace or
# control characters; 128 characters at most.
_PART = r'[^\.\s\\/:\*\?"<>\|\x01-\x1f]{1,32}'
IDENTIFIER = {"type": "string", "pattern": rf"^{_PART}(\.{_PART}){{1,7}}$", "maxLength": 128}
VERSION = {"type": "string", "pattern": r'^[^\\/:\*\?"<>\|\x01-\x1f]+$', "maxLength": 128}
LOCALE = {
    "type": "string",
    "pattern": r"^([a-zA-Z]{2,3}|[iI]-[a-zA-Z]+|[xX]-[a-zA-Z]{1,8})(-[a-zA-Z]{1,8})*$",
    "maxLength": 20,
}
URL = {"type": "string", "pattern": r"^([Hh][Tt][Tt][Pp][Ss]?)://.+$", "maxLength": 2048}
SHA256 = {"type": "string", "pattern": r"^[A-Fa-f0-9]{64}$"}
TAG = {"type": "string", "minLength": 1, "maxLength": 40}
# Three dot-separated numbers (the published pattern also bounds each by 65535).
MANIFEST_VERSION = {"type": "string", "pattern": r"^(0|[1-9][0-9]{0,4})(\.(0|[1-9][0-9]{0,4})){2}$"}


def _text(low: int, high: int) -> dict[str, Any]:
    return {"type": "string", "minLength": low, "maxLength": high}


def _closed(properties: dict[str, Any], known: set[str], required: list[str]) -> dict[str, Any]:
    """An object schema with ``properties`` constrained, any other field of ``known`` allowed, nothing else."""
    assert set(properties) <= known, set(properties) - known
    return {
        "type": "object",
        "properties": {name: properties.get(name, {}) for name in sorted(known)},
        "additionalProperties": False,
        "required": required,
    }


VERSION_SCHEMA = _closed(
    {
        "PackageIdentifier": IDENTIFIER,
        "PackageVersion": VERSION,
        "DefaultLocale": LOCALE,
        "ManifestType": {"const": "version"},
        "ManifestVersion": MANIFEST_VERSION,
    },
    {"PackageIdentifier", "PackageVersion", "DefaultLocale", "ManifestType", "ManifestVersion"},
    ["PackageIdentifier", "PackageVersion", "DefaultLocale", "ManifestType", "ManifestVersion"],
)

DEFAULT_LOCALE_FIELDS = {
    "PackageIdentifier", "PackageVersion", "PackageLocale", "Publisher", "PublisherUrl", "PublisherSupportUrl",
    "PrivacyUrl", "Author", "PackageName", "PackageUrl", "License", "LicenseUrl", "Copyright", "CopyrightUrl",
    "ShortDescription", "Description", "Moniker", "Tags", "Agreements", "ReleaseNotes", "ReleaseNotesUrl",
    "PurchaseUrl", "InstallationNotes", "Documentations", "Icons", "ManifestType", "ManifestVersion",
}  # fmt: skip
DEFAULT_LOCALE_REQUIRED = [
    "PackageIdentifier", "PackageVersion", "PackageLocale", "Publisher", "PackageName", "License",
    "ShortDescription", "ManifestType", "ManifestVersion",
]  # fmt: skip
DEFAULT_LOCALE_SCHEMA = _closed(
    {
        "PackageIdentifier": IDENTIFIER,
        "PackageVersion": VERSION,
        "PackageLocale": LOCALE,
        "Publisher": _text(2, 256),
        "PublisherUrl": URL,
        "PackageName": _text(2, 256),
        "PackageUrl": URL,
        "License": _text(3, 512),
        "LicenseUrl": URL,
        "ShortDescription": _text(3, 256),
        "Moniker": TAG,
        "Tags": {"type": "array", "items": TAG, "maxItems": 16, "uniqueItems": True},
        "ReleaseNotesUrl": URL,
        "InstallationNotes": _text(1, 10000),
        "ManifestType": {"const": "defaultLocale"},
        "ManifestVersion": MANIFEST_VERSION,
    },
    DEFAULT_LOCALE_FIELDS,
    DEFAULT_LOCALE_REQUIRED,
)

# The fields an installer entry and the installer manifest's root share (the root's apply to every entry).
INSTALLER_FIELDS = {
    "InstallerLocale", "Platform", "MinimumOSVersion", "InstallerType", "NestedInstallerType",
    "NestedInstallerFiles", "Scope", "InstallModes", "InstallerSwitches", "InstallerSuccessCodes",
    "ExpectedReturnCodes", "UpgradeBehavior", "Commands", "Protocols", "FileExtensions", "Dependencies",
    "PackageFamilyName", "ProductCode", "Capabilities", "RestrictedCapabilities", "Markets", "InstallerAbortsTerminal",
    "ReleaseDate", "InstallLocationRequired", "RequireExplicitUpgrade", "DisplayInstallWarnings",
    "UnsupportedOSArchitectures", "UnsupportedArguments", "AppsAndFeaturesEntries", "ElevationRequirement",
    "InstallationMetadata", "DownloadCommandProhibited", "RepairBehavior", "ArchiveBinariesDependOnPath",
}  # fmt: skip
_SHARED = {
    "InstallerType": {
        "enum": ["msix", "msi", "appx", "exe", "zip", "inno", "nullsoft", "wix", "burn", "pwa", "portable"]
    },
    "NestedInstallerType": {"enum": ["msix", "msi", "appx", "exe", "inno", "nullsoft", "wix", "burn", "portable"]},
    "NestedInstallerFiles": {
        "type": "array",
        "maxItems": 1024,
        "items": {
            "type": "object",
            "properties": {"RelativeFilePath": _text(1, 512), "PortableCommandAlias": _text(1, 40)},
            "additionalProperties": False,
            "required": ["RelativeFilePath"],
        },
    },
    "Scope": {"enum": ["user", "machine"]},
    "ArchiveBinariesDependOnPath": {"type": "boolean"},
}
INSTALLER_ENTRY = _closed(
    {
        **_SHARED,
        "Architecture": {"enum": ["x86", "x64", "arm", "arm64", "neutral"]},
        "InstallerUrl": URL,
        "InstallerSha256": SHA256,
    },
    INSTALLER_FIELDS | {"Architecture", "InstallerUrl", "InstallerSha256", "SignatureSha256"},
    ["Architecture", "InstallerUrl", "InstallerSha256"],
)
INSTALLER_SCHEMA = _closed(
    {
        **_SHARED,
        "PackageIdentifier": IDENTIFIER,
        "PackageVersion": VERSION,
        "Installers": {"type": "array", "items": INSTALLER_ENTRY, "minItems": 1, "maxItems": 1024},
        "ManifestType": {"const": "installer"},
        "ManifestVersion": MANIFEST_VERSION,
    },
    INSTALLER_FIELDS
    | {"PackageIdentifier", "PackageVersion", "Channel", "Installers", "ManifestType", "ManifestVersion"},
    ["PackageIdentifier", "PackageVersion", "Installers", "ManifestType", "ManifestVersion"],
)

SCHEMAS = {"version": VERSION_SCHEMA, "defaultLocale": DEFAULT_LOCALE_SCHEMA, "installer": INSTALLER_SCHEMA}
