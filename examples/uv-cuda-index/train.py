from uvdemo import main

main()
