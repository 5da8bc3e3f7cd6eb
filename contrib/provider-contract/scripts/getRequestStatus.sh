#!/bin/bash
# getRequestStatus, as LSF's resource connector and a Symphony host factory call it: getRequestStatus.sh -f FILE
exec "$(dirname "$0")/provider-action.sh" getRequestStatus "$@"
