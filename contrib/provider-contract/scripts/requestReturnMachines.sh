#!/bin/bash
# requestReturnMachines, as LSF's resource connector and a Symphony host factory call it: requestReturnMachines.sh -f FILE
exec "$(dirname "$0")/provider-action.sh" requestReturnMachines "$@"
