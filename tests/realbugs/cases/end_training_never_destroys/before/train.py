from acclib.accel import Accel


def main():
    accel = Accel()
    accel.end_training()


if __name__ == "__main__":
    main()
