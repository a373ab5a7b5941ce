#!/bin/sh
# As the official redis image's entrypoint: a redis-server started without a config file
# listens on every interface of its container, so protected mode is turned off.
set -e
if [ "$1" = redis-server ]; then
  set -- "$@" --protected-mode no
fi
exec "$@"
