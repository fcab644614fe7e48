"""HiveServer2's Thrift definitions (the part of TCLIService the endpoint speaks), loaded
from ``tcliservice.thrift`` beside this module: ``ttypes.TOpenSessionReq``, ``ttypes.TTypeId``,
... and ``ttypes.TCLIService``, the service a processor serves."""

from __future__ import annotations

from pathlib import Path

import thriftpy2

ttypes = thriftpy2.load(str(Path(__file__).with_name("tcliservice.thrift")), module_name="sqlext_tcliservice_thrift")

V6 = ttypes.TProtocolVersion.HIVE_CLI_SERVICE_PROTOCOL_V6
V10 = ttypes.TProtocolVersion.HIVE_CLI_SERVICE_PROTOCOL_V10
