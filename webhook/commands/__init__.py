"""The bodies of ``gpu-guard``'s commands: one module per command, each with ``run(args)``
returning the exit code. ``webhook.cli`` parses the arguments and dispatches here; these
modules choose the state source, the engine and the configuration, and shape the output.
"""
