"""The lines the runtime child writes to its standard output (parent and child share them)."""

#: ``WB-PHASE <name>``: the phase the child enters (a crash names the phase it died in).
PHASE = "WB-PHASE "
#: ``WB-RESULT <json>``: the task's result, the child's last line.
RESULT = "WB-RESULT "
