#!/bin/bash
# getAvailableTemplates, as LSF's resource connector and a Symphony host factory call it: getAvailableTemplates.sh -f FILE
exec "$(dirname "$0")/provider-action.sh" getAvailableTemplates "$@"
