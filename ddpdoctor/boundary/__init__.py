"""ddpdoctor's three boundaries with the outside world, each in one module that every command uses:

- ``inputs``: reading a file a user named (regular files only, a size limit, JSON/YAML with limits)
  and keeping user text out of rich/Textual markup;
- ``outputs``: writing a file a user named (checked before any work, never through a link or onto a
  device, the content kept elsewhere when the write fails);
- ``processes``: ending the processes ddpdoctor starts, on every exit path, signals included.

A leaf: it imports nothing else of ddpdoctor, so every layer may use it.
"""
