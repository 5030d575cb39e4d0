// amqp10-go: RabbitMQ's AMQP 1.0 Go client (rabbitmq-amqp-go-client)
// running one client-bench workload, so bench/client-amqp10.sh can set
// it beside warren-client and fe2o3-amqp in the same run. client-bench
// prepares the queue, starts this program and reads its one line:
// "<messages> <seconds>". Its CPU time is read by client-bench from
// the child's rusage.
//
//	amqp10-go URI publish QUEUE SIZE IN_FLIGHT SECS
//	amqp10-go URI consume QUEUE SIZE CREDIT MESSAGES
package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/Azure/go-amqp"
	rmq "github.com/rabbitmq/rabbitmq-amqp-go-client/pkg/rabbitmqamqp"
)

func main() {
	if len(os.Args) != 7 {
		fmt.Fprintln(os.Stderr, "usage: amqp10-go URI publish|consume QUEUE SIZE IN_FLIGHT|CREDIT SECS|MESSAGES")
		os.Exit(2)
	}
	uri, mode, queue := os.Args[1], os.Args[2], os.Args[3]
	size := number(os.Args[4])
	window := number(os.Args[5])
	amount := number(os.Args[6])
	ctx := context.Background()
	env := rmq.NewEnvironment(uri, nil)
	conn, err := env.NewConnection(ctx)
	must(err)
	var messages int64
	var elapsed time.Duration
	switch mode {
	case "publish":
		messages, elapsed = publish(ctx, conn, queue, size, int(window), time.Duration(amount)*time.Second)
	case "consume":
		messages, elapsed = consume(ctx, conn, queue, int32(window), amount)
	default:
		fmt.Fprintln(os.Stderr, "mode must be publish or consume")
		os.Exit(2)
	}
	must(conn.Close(ctx))
	fmt.Printf("%d %.6f\n", messages, elapsed.Seconds())
}

// publish sends transient messages of size bytes for secs, at most
// inFlight awaiting their outcome (PublishAsync, the client's own
// bound), and counts the accepted ones.
func publish(ctx context.Context, conn *rmq.AmqpConnection, queue string, size int64, inFlight int, secs time.Duration) (int64, time.Duration) {
	publisher, err := conn.NewPublisher(ctx, &rmq.QueueAddress{Queue: queue}, &rmq.PublisherOptions{
		MaxInFlight:    inFlight,
		PublishTimeout: 60 * time.Second,
	})
	must(err)
	body := make([]byte, size)
	var accepted atomic.Int64
	var wg sync.WaitGroup
	started := time.Now()
	for time.Since(started) < secs {
		m := rmq.NewMessage(body)
		m.Header = &amqp.MessageHeader{Durable: false}
		wg.Add(1)
		err := publisher.PublishAsync(ctx, m, func(r *rmq.PublishResult, err error) {
			defer wg.Done()
			must(err)
			if _, ok := r.Outcome.(*rmq.StateAccepted); !ok {
				fmt.Fprintf(os.Stderr, "outcome %v\n", r.Outcome)
				os.Exit(1)
			}
			accepted.Add(1)
		})
		must(err)
	}
	wg.Wait()
	elapsed := time.Since(started)
	must(publisher.Close(ctx))
	return accepted.Load(), elapsed
}

// consume takes messages deliveries with credit window credit, each
// accepted.
func consume(ctx context.Context, conn *rmq.AmqpConnection, queue string, credit int32, messages int64) (int64, time.Duration) {
	consumer, err := conn.NewConsumer(ctx, queue, &rmq.ConsumerOptions{InitialCredits: credit})
	must(err)
	started := time.Now()
	for i := int64(0); i < messages; i++ {
		d, err := consumer.Receive(ctx)
		must(err)
		must(d.Accept(ctx))
	}
	elapsed := time.Since(started)
	must(consumer.Close(ctx))
	return messages, elapsed
}

func number(s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	must(err)
	return n
}

func must(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
}
