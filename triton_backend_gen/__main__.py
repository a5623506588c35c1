from triton_backend_gen.cli import main

main()
