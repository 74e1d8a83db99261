from kernelforge.cli import main

main()
