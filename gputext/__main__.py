from .daemon.client import main

main()
