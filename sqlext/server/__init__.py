"""The process ``sqlext serve`` leaves running in a folder: one warm Spark driver (a classic
PySpark session) that every client of the folder shares.

- :mod:`~sqlext.server.process` starts it: Spark with the folder's settings and catalog, Spark
  Connect inside its driver (``sqlext sql``, ``run``, ``explain`` and ``build`` attach there),
  and the doors below; it stops on SIGTERM.
- :mod:`~sqlext.server.streams` is the door of ``sqlext stream``: an incremental run needs
  the driver's JVM, which a Spark Connect client has not, so the run itself is carried out in
  this process, its output sent back to the command that asked.
- :mod:`~sqlext.server.hive` is the HiveServer2 endpoint (JDBC, ODBC, PyHive), off unless
  ``sqlext serve --jdbc-port`` asks for it.
"""
