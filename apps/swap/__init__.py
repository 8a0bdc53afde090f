"""Replacing a model while the app runs, for ``edgert camera`` and ``edgert serve``: three
triggers (SIGHUP, ``--watch-model``, ``POST /model``), a check, rollback and a canary.

``options`` (the command-line options, :class:`~.options.SwapOptions`), ``core`` (what names a
model, the request queue and its thread that every swap shares), ``camera`` (the camera's model
slot, its rollback and ``--check-against``'s canary), ``secondary`` (a camera secondary's swap and
the camera's ``/model`` routes) and ``serve`` (Triton's swapper, through its model control).
"""
