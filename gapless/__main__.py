from gapless.cli import main

main()
