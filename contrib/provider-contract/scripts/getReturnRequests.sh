#!/bin/bash
# getReturnRequests, as LSF's resource connector and a Symphony host factory call it: getReturnRequests.sh -f FILE
exec "$(dirname "$0")/provider-action.sh" getReturnRequests "$@"
