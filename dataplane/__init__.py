"""fleetplane data plane: the router and the engine side (load publisher, engine-sim)."""

from dataplane import form as _form

# Before any hot module is imported: compiled or plain, all or nothing (dataplane/form.py).
FORM = _form.choose()
