from logbroker.cli import main

main()
