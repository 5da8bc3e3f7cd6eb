#!/bin/bash
# The one body of the provider scripts (docs/provider-contract.md): LSF's resource connector and
# a Symphony host factory run `ACTION.sh -f FILE` and read the JSON answer on stdout and the exit
# code; this runs `xceprov provider ACTION -f FILE`, which answers so.
#   XCEPROV         the xceprov executable (default: xceprov on PATH)
#   XCEPROV_CONFIG  the site configuration (default: xceprov.yaml in the provider's conf
#                   directory if it is there: $PRO_CONF_DIR/conf for LSF, $HF_PROVIDER_CONFDIR
#                   for a host factory; else xceprov's own default)
set -u

action=${1:?usage: provider-action.sh ACTION -f FILE}
shift
if [ "$#" -ne 2 ] || [ "$1" != "-f" ]; then
    # The caller reads a JSON answer on stdout, an error too.
    printf '{"error": {"type": "bad_input", "message": "usage: %s.sh -f FILE"}}\n' "$action"
    exit 1
fi

if [ -z "${XCEPROV_CONFIG:-}" ]; then
    for conf_dir in "${PRO_CONF_DIR:+$PRO_CONF_DIR/conf}" "${HF_PROVIDER_CONFDIR:-}"; do
        if [ -n "$conf_dir" ] && [ -f "$conf_dir/xceprov.yaml" ]; then
            export XCEPROV_CONFIG="$conf_dir/xceprov.yaml"
            break
        fi
    done
fi

exec "${XCEPROV:-xceprov}" provider "$action" -f "$2"
