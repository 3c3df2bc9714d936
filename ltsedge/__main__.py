from ltsedge.cli import main

main()
