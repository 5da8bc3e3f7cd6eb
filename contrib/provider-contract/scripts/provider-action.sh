#!/bin/bash
# The one body of the provider scripts (docs/provider-contract.md): LSF's resource connector and
# a Symphony host factory run `ACTION.sh -f FILE` and read the JSON answer on stdout and the exit
# code; this runs `xceprov provider ACTION -f FILE`, which answers so.
#   XCEPROV         the xceprov executable (default: xceprov on PATH)
#   XCEPROV_CONFIG  the site configuration (default: xceprov.yaml where the calling scheduler
#                   keeps the provider's configuration, told by the environment it sets:
#                   $PRO_CONF_DIR/conf for LSF; $HF_PROVIDER_CONFDIR, else
#                   $HF_CONFDIR/providers/$HF_PROVIDER_NAME, for a host factory). xceprov looks
#                   there itself and refuses, naming where it looked, when it is not there.
set -u

action=${1:?usage: provider-action.sh ACTION -f FILE}
shift
if [ "$#" -ne 2 ] || [ "$1" != "-f" ]; then
    # The caller reads a JSON answer on stdout, an error too (its reason also as the top-level
    # message, where LSF and a host factory read it).
    printf '{"error": {"type": "bad_input", "message": "usage: %s.sh -f FILE"}, "message": "usage: %s.sh -f FILE"}\n' \
        "$action" "$action"
    exit 1
fi

exec "${XCEPROV:-xceprov}" provider "$action" -f "$2"
