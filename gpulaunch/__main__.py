from gpulaunch.cli import main

main()
