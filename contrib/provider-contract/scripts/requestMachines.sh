#!/bin/bash
# requestMachines, as LSF's resource connector and a Symphony host factory call it: requestMachines.sh -f FILE
exec "$(dirname "$0")/provider-action.sh" requestMachines "$@"
