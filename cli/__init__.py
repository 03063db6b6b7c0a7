"""The ``governor`` command line: click commands over the pure library, rendered with rich."""
