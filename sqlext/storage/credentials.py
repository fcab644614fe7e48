"""The credentials Hadoop's settings give for a store, in the forms pyarrow's file systems (and
delta-rs, :mod:`sqlext.delta`) take: s3a's endpoint and keys for a bucket, and an Azure storage
account's key, SAS token, OAuth client or managed identity."""

from __future__ import annotations

from urllib.parse import urlparse

import pyarrow.fs as pafs


def s3a_setting(conf, bucket: str, name: str) -> str | None:
    """Hadoop's s3a setting ``name`` for ``bucket`` (its per-bucket value first)."""
    return conf.get(f"fs.s3a.bucket.{bucket}.{name}") or conf.get(f"fs.s3a.{name}")


# Azure's schemes in Hadoop (ABFS, and the older WASB) and the protocol each speaks by default
AZURE = {"abfs": "https", "abfss": "https", "wasb": "http", "wasbs": "https"}


def azure_account(host: str, conf) -> dict | None:
    """The storage account at ``host`` (``<account>.dfs.core.windows.net``, or ``.blob.`` for
    WASB) and the credential Hadoop's settings give for it, as pyarrow's ``AzureFileSystem``
    takes them: a shared key, a fixed SAS token, an OAuth client secret, or a managed identity.
    None where the settings name a credential pyarrow has no form of (a custom token
    provider): Hadoop's connector keeps that store. A setting for the account's host comes
    before the one for every account, as in Hadoop.

    >>> azure_account("lake.dfs.core.windows.net", {"fs.azure.account.key.lake.dfs.core.windows.net": "k"})
    {'account_name': 'lake', 'account_key': 'k', 'dfs_storage_authority': '.dfs.core.windows.net', \
'blob_storage_authority': '.blob.core.windows.net'}
    """
    def setting(name):
        return conf.get(f"fs.azure.{name}.{host}") or conf.get(f"fs.azure.{name}")

    account, dot, domain = host.partition(".")
    service, _, cloud = domain.partition(".")
    if not (account and dot and service in ("dfs", "blob") and cloud):
        return None
    found = {"account_name": account}
    auth = (setting("account.auth.type") or "SharedKey").lower()
    if auth == "sharedkey" and setting("account.key"):
        found["account_key"] = setting("account.key")
    elif auth == "sas" and setting("sas.fixed.token") and not setting("sas.token.provider.type"):
        # Hadoop prefers a SAS token provider to the fixed token when both are set
        found["sas_token"] = setting("sas.fixed.token").lstrip("?")
    elif auth == "oauth":
        provider = (setting("account.oauth.provider.type") or "").rpartition(".")[2]
        client = setting("account.oauth2.client.id")
        if provider == "ClientCredsTokenProvider":
            secret = setting("account.oauth2.client.secret")
            tenant = _azure_tenant(setting("account.oauth2.client.endpoint") or "")
            if not (client and secret and tenant):
                return None
            found.update(client_id=client, client_secret=secret, tenant_id=tenant)
        elif provider == "MsiTokenProvider":
            if client:  # a user-assigned identity; else the machine's own
                found["client_id"] = client
        else:
            return None
    else:
        return None
    found.update(dfs_storage_authority=f".dfs.{cloud}", blob_storage_authority=f".blob.{cloud}")
    return found


def _azure_tenant(endpoint: str) -> str | None:
    """The tenant of an OAuth token endpoint (``https://login.microsoftonline.com/<tenant>/oauth2/token``)."""
    parts = urlparse(endpoint).path.strip("/").split("/")
    return parts[0] if len(parts) >= 2 and parts[1] == "oauth2" and parts[0] else None


def s3_filesystem(bucket: str, conf):
    """pyarrow's S3 with the endpoint and keys Hadoop's s3a has for ``bucket``."""
    def setting(name):
        return s3a_setting(conf, bucket, name)

    options = {}
    if setting("access.key"):
        options.update(access_key=setting("access.key"), secret_key=setting("secret.key"),
                       session_token=setting("session.token"))
    if setting("endpoint"):
        endpoint = setting("endpoint")
        options["endpoint_override"] = endpoint
        options["scheme"] = "http" if endpoint.startswith("http:") or setting("connection.ssl.enabled") == "false" \
            else "https"
    if setting("endpoint.region"):
        options["region"] = setting("endpoint.region")
    if setting("path.style.access") == "true":
        options["force_virtual_addressing"] = False
    return pafs.S3FileSystem(**options)
